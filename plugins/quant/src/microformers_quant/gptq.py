"""``quant_method: "gptq"`` and ``"awq"``: load GPTQ checkpoints (AutoGPTQ / exllama packing) and AutoAWQ GEMM
checkpoints (:class:`AwqQuantizer`), de-quantised on load.

A GPTQ folder stores each quantized ``nn.Linear`` (``in_features`` K, ``out_features`` N) as

- ``qweight``: int32 ``(K * bits / 32, N)``, ``32 / bits`` values of one column packed per int32 along
  the input dimension (value ``k`` at bit ``bits * (k % (32 / bits))`` of row ``k // (32 / bits)``);
- ``qzeros``: int32 ``(groups, N * bits / 32)``, the zero points packed the same way along the output
  dimension; ``checkpoint_format: "gptq"`` (the default, "v1") stores ``zero - 1``, ``"gptq_v2"`` the zero;
- ``scales``: float ``(groups, N)``;
- ``g_idx``: int32 ``(K,)``, the group of each input (``k // group_size`` unless ``desc_act`` reordered
  them; any order is honoured); optional (then ``k // group_size``);
- ``bias``: float ``(N,)``, optional.

Weight ``[n, k] = scales[g_idx[k], n] * (q[k, n] - zero[g_idx[k], n])``, computed in float32: a float16
scale times an integer below 2**bits in magnitude is exact there, so the loaded model is the exact
de-quantised model (in the requested dtype). The layers are plain float ``nn.Linear`` afterwards; the
model's ``config.quantization_config`` is dropped, so ``save_pretrained`` writes the float model.
Quantizing a float model with GPTQ (calibration) is not done here: ``Int4Config`` is the round-to-nearest
int4 of this library.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from microformers.errors import CheckpointError, ConfigError
from microformers_sdk.quantization import Quantizer

PACKED_PARTS = ("qweight", "qzeros", "scales", "g_idx")
GPTQ_BITS = (2, 4, 8)
# What GPTQConfig.to_dict() writes that only describes how the checkpoint was made (calibration data,
# damping, kernels to pick on GPUs): accepted when loading a quantized checkpoint, whose tensors hold
# the result, and refused when there is nothing quantized to load.
GPTQ_PROVENANCE_KEYS = frozenset(
    {
        "dataset",
        "tokenizer",
        "damp_percent",
        "damp_auto_increment",
        "true_sequential",
        "static_groups",
        "use_exllama",
        "exllama_config",
        "use_cuda_fp16",
        "model_seqlen",
        "block_name_to_quantize",
        "module_name_preceding_first_block",
        "batch_size",
        "pad_token_id",
        "max_input_length",
        "cache_block_outputs",
        "modules_in_block_to_quantize",
        "backend",
        "meta",
        "act_group_aware",
        "disable_exllama",
        "quantize_config",
    }
)
GPTQ_KEYS = frozenset(
    {"quant_method", "bits", "group_size", "desc_act", "sym", "checkpoint_format", "format", "modules_to_not_convert"}
)


def _int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"quantization_config.{key} must be an integer, got {value!r}")
    return value


class GptqQuantizer(Quantizer):
    quant_method = "gptq"

    def __init__(self, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - GPTQ_KEYS - GPTQ_PROVENANCE_KEYS)
        if unknown:
            raise ConfigError(
                f"quantization_config for quant_method 'gptq' has unknown field(s) {unknown}; accepted: "
                f"{sorted(GPTQ_KEYS)} and the GPTQConfig fields that describe how the checkpoint was made"
            )
        super().__init__(config)
        self.bits = _int(self.config, "bits", 4)
        if self.bits not in GPTQ_BITS:
            raise ConfigError(
                f"quantization_config.bits={self.bits}: GPTQ checkpoints of {', '.join(map(str, GPTQ_BITS))} bits "
                "load here (3-bit packing crosses int32 words and is not supported)"
            )
        self.group_size = _int(self.config, "group_size", 128)
        if self.group_size != -1 and self.group_size <= 0:
            raise ConfigError(
                f"quantization_config.group_size must be a positive integer or -1 (one group per row), "
                f"got {self.group_size}"
            )
        for key in ("desc_act", "sym"):
            value = self.config.get(key, key == "sym")
            if not isinstance(value, bool):
                raise ConfigError(f"quantization_config.{key} must be true or false, got {value!r}")
        # newer writers put the packing in "format" too; they must agree
        formats = {self.config[k] for k in ("checkpoint_format", "format") if self.config.get(k) is not None}
        self.checkpoint_format = formats.pop() if len(formats) == 1 else "gptq" if not formats else formats
        if self.checkpoint_format not in ("gptq", "gptq_v2"):
            raise ConfigError(
                f"quantization_config.checkpoint_format={self.checkpoint_format!r}: GPTQ folders in the 'gptq' "
                "(AutoGPTQ/exllama, zero points stored minus one) and 'gptq_v2' layouts load here; re-save others "
                "in one of them"
            )

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"GPTQ {self.bits}-bit checkpoint (group {self.group_size}), de-quantised to float on load"

    def prepare(self, model: nn.Module, fmt: Any, files: list[Any], dtype: torch.dtype) -> Mapping[str, torch.Tensor]:
        source = fmt.load(files, dtype=dtype)
        skipped = [stem for stem in _packed_stems(source) if self.skipped(stem)]
        if skipped:
            raise ConfigError(
                f"quantization_config.modules_to_not_convert names {skipped[:3]}, but {files[0]} stores them "
                f"{self.quant_method.upper()}-packed; a quantized checkpoint's layers cannot be kept float: drop those names"
            )
        unpacked = GptqSource(source, self, str(files[0]))
        if not unpacked.stems:
            raise ConfigError(
                f"quant_method '{self.quant_method}' loads {self.quant_method.upper()}-quantized checkpoints, but "
                f"{files[0]} holds no '*.qweight' tensors (a float checkpoint). Quantizing with "
                f"{self.quant_method.upper()} needs a calibration run that microformers "
                "does not do: load it with quantization_config=Int4Config(group_size=128) (round-to-nearest int4) "
                "or without quantization"
            )
        return unpacked

    def finish(self, model: nn.Module) -> None:
        super().finish(model)
        config = getattr(model, "config", None)
        if config is not None and "quantization_config" in vars(config):
            # the layers are float now: saving must not claim GPTQ tensors it does not write
            delattr(config, "quantization_config")

    def weight_shape(self, qweight_shape: tuple[int, ...]) -> tuple[int, int]:
        """The float ``(out_features, in_features)`` of a layer whose qweight has this shape."""
        rows, cols = qweight_shape
        return cols, rows * (32 // self.bits)

    def unpack(self, stem: str, parts: Mapping[str, torch.Tensor], where: str) -> torch.Tensor:
        """The float32 ``(N, K)`` weight of one layer from its packed tensors (checked against each other)."""
        qweight, qzeros, scales = parts["qweight"], parts["qzeros"], parts["scales"]
        per_word = 32 // self.bits
        for name in ("qweight", "qzeros"):
            if parts[name].dtype != torch.int32 or parts[name].dim() != 2:
                raise CheckpointError(
                    f"{where}: '{stem}.{name}' is {parts[name].dtype} {tuple(parts[name].shape)}; GPTQ stores it as "
                    "a 2-D int32 tensor"
                )
        if not scales.is_floating_point() or scales.dim() != 2:
            raise CheckpointError(f"{where}: '{stem}.scales' must be a 2-D float tensor, got {scales.dtype}")
        k, n = qweight.shape[0] * per_word, qweight.shape[1]
        if not k or not n:
            raise CheckpointError(f"{where}: '{stem}.qweight' is empty {tuple(qweight.shape)}; the folder is corrupt")
        groups = 1 if self.group_size == -1 else -(-k // self.group_size)
        if scales.shape != (groups, n) or qzeros.shape != (groups, n // per_word) or n % per_word:
            raise CheckpointError(
                f"{where}: layer '{stem}' has qweight {tuple(qweight.shape)} ({k} inputs x {n} outputs at "
                f"{self.bits} bits), so with group_size {self.group_size} it needs scales ({groups}, {n}) and qzeros "
                f"({groups}, {n // per_word}); it has scales {tuple(scales.shape)} and qzeros {tuple(qzeros.shape)}. "
                "The folder's quantization_config (bits, group_size) does not match its tensors"
            )
        g_idx = parts.get("g_idx")
        if g_idx is None:
            g_idx = torch.arange(k) // (k if self.group_size == -1 else self.group_size)
        elif g_idx.shape != (k,) or g_idx.is_floating_point() or int(g_idx.min()) < 0 or int(g_idx.max()) >= groups:
            raise CheckpointError(
                f"{where}: '{stem}.g_idx' must hold {k} group numbers in 0..{groups - 1}; it is {g_idx.dtype} "
                f"{tuple(g_idx.shape)}. The folder is corrupt or its group_size is wrong"
            )
        g_idx = g_idx.long()
        q = _unpack(qweight, self.bits, dim=0)  # (K, N)
        zeros = _unpack(qzeros, self.bits, dim=1)  # (groups, N)
        if self.checkpoint_format == "gptq":
            zeros = zeros + 1
        # exact in float32: float16 scale times an integer of at most bits + 1 bits
        weight = scales.float()[g_idx] * (q - zeros[g_idx]).float()
        return weight.t().contiguous()


AWQ_KEYS = frozenset(
    {"quant_method", "bits", "group_size", "zero_point", "version", "format", "modules_to_not_convert"}
)
AWQ_PROVENANCE_KEYS = GPTQ_PROVENANCE_KEYS | {"desc_act", "sym", "do_fuse", "fuse_max_seq_len", "modules_to_fuse"}
# AutoAWQ's GEMM packing puts output column ``8 c + ORDER[i]`` in bits ``4 i`` of word ``c``
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


class AwqQuantizer(GptqQuantizer):
    """``quant_method: "awq"``: AutoAWQ GEMM checkpoints, de-quantised on load.

    Per layer: ``qweight`` int32 ``(K, N / 8)`` and ``qzeros`` int32 ``(K / group, N / 8)``, 4-bit values
    packed along the output dimension in AutoAWQ's interleaved order; ``scales`` float ``(K / group, N)``;
    weight ``[n, k] = scales[g, n] * (q[k, n] - zeros[g, n])`` with ``g = k // group_size``.
    """

    quant_method = "awq"

    def __init__(self, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - AWQ_KEYS - AWQ_PROVENANCE_KEYS)
        if unknown:
            raise ConfigError(
                f"quantization_config for quant_method 'awq' has unknown field(s) {unknown}; accepted: "
                f"{sorted(AWQ_KEYS)} and the AwqConfig fields that describe how the checkpoint was made"
            )
        Quantizer.__init__(self, config)
        self.bits = _int(self.config, "bits", 4)
        if self.bits != 4:
            raise ConfigError(f"quantization_config.bits={self.bits}: AWQ checkpoints are 4-bit")
        self.group_size = _int(self.config, "group_size", 128)
        if self.group_size <= 0:
            raise ConfigError(f"quantization_config.group_size must be a positive integer, got {self.group_size}")
        versions = {str(self.config[k]).lower() for k in ("version", "format") if self.config.get(k) is not None}
        if versions - {"gemm"}:
            raise ConfigError(
                f"quantization_config version/format {sorted(versions)}: AWQ checkpoints packed for the 'gemm' kernel "
                "load here (GEMV, exllama, marlin and ipex packings do not); re-export the model with version='gemm'"
            )
        if self.config.get("zero_point", True) is not True:
            raise ConfigError("quantization_config.zero_point=false: only AWQ checkpoints with zero points load here")
        self.checkpoint_format = "awq"

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"AWQ 4-bit GEMM checkpoint (group {self.group_size}), de-quantised to float on load"

    def weight_shape(self, qweight_shape: tuple[int, ...]) -> tuple[int, int]:
        rows, cols = qweight_shape
        return cols * 8, rows

    def unpack(self, stem: str, parts: Mapping[str, torch.Tensor], where: str) -> torch.Tensor:
        qweight, qzeros, scales = parts["qweight"], parts["qzeros"], parts["scales"]
        for name in ("qweight", "qzeros"):
            if parts[name].dtype != torch.int32 or parts[name].dim() != 2:
                raise CheckpointError(
                    f"{where}: '{stem}.{name}' is {parts[name].dtype} {tuple(parts[name].shape)}; AWQ stores it as "
                    "a 2-D int32 tensor"
                )
        if not scales.is_floating_point() or scales.dim() != 2:
            raise CheckpointError(f"{where}: '{stem}.scales' must be a 2-D float tensor, got {scales.dtype}")
        if "g_idx" in parts:
            raise CheckpointError(f"{where}: '{stem}.g_idx' is a GPTQ tensor; AWQ layers have none")
        k, n = qweight.shape[0], qweight.shape[1] * 8
        groups = -(-k // self.group_size)
        if scales.shape != (groups, n) or qzeros.shape != (groups, n // 8):
            raise CheckpointError(
                f"{where}: layer '{stem}' has qweight {tuple(qweight.shape)} ({k} inputs x {n} outputs), so with "
                f"group_size {self.group_size} it needs scales ({groups}, {n}) and qzeros ({groups}, {n // 8}); it has "
                f"scales {tuple(scales.shape)} and qzeros {tuple(qzeros.shape)}. The folder's quantization_config "
                "(group_size) does not match its tensors"
            )
        columns = torch.tensor(AWQ_ORDER).argsort()  # unpacked field -> output column order
        q = _unpack(qweight, 4, dim=1).view(k, -1, 8)[:, :, columns].reshape(k, n)
        zeros = _unpack(qzeros, 4, dim=1).view(groups, -1, 8)[:, :, columns].reshape(groups, n)
        g_idx = torch.arange(k) // self.group_size
        weight = scales.float()[g_idx] * (q - zeros[g_idx]).float()  # exact in float32, as for GPTQ
        return weight.t().contiguous()


def _unpack(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """int32 words -> the ``32 / bits`` unsigned fields of each, expanded along ``dim`` (lowest bits first)."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    mask = (1 << bits) - 1
    if dim == 0:
        fields = (packed.unsqueeze(1) >> shifts.view(1, -1, 1)) & mask  # (R, per, N)
        return fields.reshape(-1, packed.shape[1])
    fields = (packed.unsqueeze(2) >> shifts.view(1, 1, -1)) & mask  # (G, C, per)
    return fields.reshape(packed.shape[0], -1)


def _packed_stems(source: Mapping[str, Any]) -> list[str]:
    return sorted(key[: -len(".qweight")] for key in source if key.endswith(".qweight"))


def _shape(source: Mapping[str, Any], key: str) -> tuple[int, ...]:
    shape_of = getattr(source, "shape_of", None)
    return tuple(shape_of(key)) if shape_of is not None else tuple(source[key].shape)


class GptqSource(Mapping[str, torch.Tensor]):
    """A checkpoint mapping in which each layer's packed tensors read as its float ``<layer>.weight``."""

    def __init__(self, source: Mapping[str, torch.Tensor], quantizer: GptqQuantizer, where: str) -> None:
        self.source, self.quantizer, self.where = source, quantizer, where
        self.stems = _packed_stems(source)
        hidden: set[str] = set()
        self._derived: dict[str, str] = {}
        self._shapes: dict[str, tuple[int, int]] = {}
        for stem in self.stems:
            missing = [p for p in ("qzeros", "scales") if f"{stem}.{p}" not in source]
            if missing:
                raise CheckpointError(
                    f"{where}: layer '{stem}' has a qweight but no {' or '.join(missing)}; the GPTQ folder is "
                    "incomplete. Download or export it again"
                )
            if f"{stem}.weight" in source:
                raise CheckpointError(f"{where}: layer '{stem}' has both a float weight and GPTQ tensors")
            self._derived[f"{stem}.weight"] = stem
            self._shapes[f"{stem}.weight"] = quantizer.weight_shape(_shape(source, f"{stem}.qweight"))
            hidden.update(f"{stem}.{part}" for part in PACKED_PARTS)
        self._keys = [k for k in source if k not in hidden] + list(self._derived)
        self._key_set = set(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._key_set

    def __getitem__(self, key: str) -> torch.Tensor:
        stem = self._derived.get(key)
        if stem is None:
            return self.source[key]
        parts = {p: self.source[f"{stem}.{p}"] for p in PACKED_PARTS if f"{stem}.{p}" in self.source}
        return self.quantizer.unpack(stem, parts, self.where)

    def shape_of(self, key: str) -> tuple[int, ...]:
        shape = self._shapes.get(key)
        return shape if shape is not None else _shape(self.source, key)

    def file_of(self, key: str) -> Any:
        stem = self._derived.get(key)
        file_of = getattr(self.source, "file_of", None)
        if file_of is None:
            return None
        return file_of(f"{stem}.qweight" if stem is not None else key)

"""``quant_method: "gptq"`` and ``"awq"``: load GPTQ checkpoints (AutoGPTQ / exllama packing) and AutoAWQ GEMM
checkpoints (:class:`AwqQuantizer`): 4-bit layers kept packed, in this plugin's int4 format; the rest de-quantised.

A GPTQ folder stores each quantized ``nn.Linear`` (``in_features`` K, ``out_features`` N) as

- ``qweight``: int32 ``(K * bits / 32, N)``, ``32 / bits`` values of one column packed per int32 along
  the input dimension (value ``k`` at bit ``bits * (k % (32 / bits))`` of row ``k // (32 / bits)``);
- ``qzeros``: int32 ``(groups, N * bits / 32)``, the zero points packed the same way along the output
  dimension; ``checkpoint_format: "gptq"`` (the default, "v1") stores ``zero - 1``, ``"gptq_v2"`` the zero;
- ``scales``: float ``(groups, N)``;
- ``g_idx``: int32 ``(K,)``, the group of each input (``k // group_size`` unless ``desc_act`` reordered
  them; any order is honoured); optional (then ``k // group_size``);
- ``bias``: float ``(N,)``, optional.

Weight ``[n, k] = scales[g_idx[k], n] * (q[k, n] - zero[g_idx[k], n])``.

**Kept packed** (``QuantLinear``, 4 bits, the ``int4`` kernels and the native decoder step): a 4-bit layer
whose group size (``group_size``, or ``K`` for -1) is a multiple of 32 that divides ``K`` and whose
``g_idx`` is the plain order ``k // group_size`` (or absent). Each is converted once, on load, to the int4
format of :mod:`.modules` (value ``scale * q + min``, float16 ``scale`` and ``min`` per group of inputs):
``q`` and ``scale`` carry over unchanged and ``min = -scale * zero``, rounded to float16. That rounding is
the one difference from the de-quantised weights: at most half a float16 step of ``scale * zero``
(relative 2**-11, i.e. below ``8 * scale * 2**-11`` for 4-bit zero points ≤ 16), shared by a group.
Scales stored in another float dtype than float16 are rounded to float16 too. Memory stays about 4.5 bits
per weight; ``config.quantization_config`` becomes ``{"quant_method": "int4", ...}`` (the tensors it
now holds), with the layers left float in ``modules_to_not_convert``, so ``save_pretrained`` writes an
``int4`` folder that reloads as it is.

**De-quantised** (a float ``nn.Linear`` holding ``scale * (q - zero)`` in float32, exact there: a float16
scale times an integer below 2**bits in magnitude): 2- and 8-bit checkpoints (the kernels have no
asymmetric 2/8-bit format), and 4-bit layers the kernels cannot take: a group size not a multiple of 32
or not dividing ``K``, or an act-order ``g_idx`` (``desc_act``) that is not the plain group order (the
kernels read a group from consecutive inputs; permuting each layer's inputs on every call would cost
what the kernels save). The 4-bit cases log one warning naming the layers and the reason. When no layer
is kept, ``config.quantization_config`` is dropped, so ``save_pretrained`` writes the float model.

Quantizing a float model with GPTQ (calibration) is not done here: ``Int4Config`` is the round-to-nearest
int4 of this library.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from microformers.errors import CheckpointError, ConfigError
from microformers_sdk.quantization import Quantizer, module_for

from . import kernels
from .modules import QuantLinear

logger = logging.getLogger("microformers")

PACKED_PARTS = ("qweight", "qzeros", "scales", "g_idx")
GPTQ_BITS = (2, 4, 8)
INT4_PARTS = ("qweight", "scales", "mins")  # what a kept layer's QuantLinear holds
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
        how = "kept packed as int4 where the kernels take it" if self.bits == 4 else "de-quantised to float on load"
        return f"GPTQ {self.bits}-bit checkpoint (group {self.group_size}), {how}"

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
        self.keep_packed(model, unpacked, source, str(files[0]))
        return unpacked

    def keep_packed(self, model: nn.Module, unpacked: GptqSource, source: Mapping[str, Any], where: str) -> None:
        """Install a 4-bit ``QuantLinear`` for every layer the int4 kernels can take (the module docstring
        says which); tell ``unpacked`` to read those as int4 tensors."""
        if self.bits != 4:
            return
        prefix = getattr(model, "base_model_prefix", "")
        linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
        refused: dict[str, list[str]] = {}
        for stem in unpacked.stems:
            name = module_for(stem, linears, prefix)
            if name is None:
                continue  # not a layer of this model: the load reports the unexpected tensors
            linear = linears[name]
            out_features, in_features = self.weight_shape(_shape(source, f"{stem}.qweight"))
            if (out_features, in_features) != (linear.out_features, linear.in_features):
                raise CheckpointError(
                    f"{where}: '{stem}.qweight' has shape {_shape(source, f'{stem}.qweight')}, a {in_features}-input x "
                    f"{out_features}-output layer at {self.bits} bits, but the model's '{name}' has {linear.in_features} "
                    f"inputs x {linear.out_features} outputs. The folder's quantization_config (bits) or config.json "
                    "does not match its tensors"
                )
            group = in_features if self.group_size == -1 else self.group_size
            reason = None
            if group % 32 or in_features % group:
                reason = f"group size {group} is not a multiple of 32 dividing the {in_features} inputs"
            elif f"{stem}.g_idx" in source:
                g_idx = source[f"{stem}.g_idx"]
                plain = torch.arange(in_features) // group
                if (
                    g_idx.shape == plain.shape
                    and not g_idx.is_floating_point()
                    and not torch.equal(g_idx.long(), plain)
                ):
                    reason = "act-order g_idx (desc_act) is not the plain group order the int4 kernels read"
            if reason is not None:
                refused.setdefault(reason, []).append(stem)
                continue
            self.install(model, name, QuantLinear.like(linear, 4, group, name))
            unpacked.keep(stem, group)
        for reason, stems in refused.items():
            logger.warning(
                "%s: %d %s layer(s) (%s%s) load de-quantised to float, not int4: %s",
                where,
                len(stems),
                self.quant_method.upper(),
                ", ".join(stems[:2]),
                ", ..." if len(stems) > 2 else "",
                reason,
            )

    def finish(self, model: nn.Module) -> None:
        super().finish(model)
        config = getattr(model, "config", None)
        if not self.converted:
            if config is not None and "quantization_config" in vars(config):
                # the layers are float now: saving must not claim GPTQ tensors it does not write
                delattr(config, "quantization_config")
            return
        if config is not None:
            # what the model now holds: int4 layers (reloaded as they are) and float ones, which an int4 load
            # must leave float (every other linear and embedding, the head included)
            floats = [
                name
                for name, module in model.named_modules()
                if isinstance(module, (nn.Linear, nn.Embedding)) and name not in self.converted
            ]
            groups = sorted({module.group for module in self.converted.values()})  # type: ignore[union-attr]
            config.quantization_config = {
                "quant_method": "int4",
                "group_size": groups[0],
                "modules_to_not_convert": floats,
            }
        kernels.native_available()  # build/load now, not inside the first forward (as the int4 quantizer does)

    def int4_parts(
        self, stem: str, parts: Mapping[str, torch.Tensor], where: str, group: int
    ) -> dict[str, torch.Tensor]:
        """One kept layer's tensors in the int4 format of :mod:`.modules`: ``qweight`` uint8 ``(N, K / 2)`` (ggml
        nibble order), float16 ``scales`` and ``mins = -scale * zero`` ``(N, K / group)``."""
        q, zeros, scales, _ = self.integers(stem, parts, where)
        k, n = q.shape
        nibbles = q.t().to(torch.uint8).reshape(n, k // 32, 2, 16)  # value j low nibble, value j + 16 high
        packed = (nibbles[:, :, 0, :] | (nibbles[:, :, 1, :] << 4)).reshape(n, k // 2).contiguous()
        mins = -(scales.float() * zeros.float())  # exact in float32; rounded once, to float16
        return {
            "qweight": packed,
            "scales": scales.t().to(torch.float16).contiguous(),
            "mins": mins.t().to(torch.float16).contiguous(),
        }

    def weight_shape(self, qweight_shape: tuple[int, ...]) -> tuple[int, int]:
        """The float ``(out_features, in_features)`` of a layer whose qweight has this shape."""
        rows, cols = qweight_shape
        return cols, rows * (32 // self.bits)

    def unpack(self, stem: str, parts: Mapping[str, torch.Tensor], where: str) -> torch.Tensor:
        """The float32 ``(N, K)`` weight of one layer from its packed tensors (checked against each other)."""
        q, zeros, scales, g_idx = self.integers(stem, parts, where)
        # exact in float32: float16 scale times an integer of at most bits + 1 bits
        weight = scales.float()[g_idx] * (q - zeros[g_idx]).float()
        return weight.t().contiguous()

    def integers(
        self, stem: str, parts: Mapping[str, torch.Tensor], where: str
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One layer's ``q`` ``(K, N)``, zero points ``(groups, N)`` (as integers), ``scales`` ``(groups, N)`` and
        ``g_idx`` ``(K,)``, from its packed tensors (checked against each other)."""
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
        return q, zeros, scales, g_idx


AWQ_KEYS = frozenset(
    {"quant_method", "bits", "group_size", "zero_point", "version", "format", "modules_to_not_convert"}
)
AWQ_PROVENANCE_KEYS = GPTQ_PROVENANCE_KEYS | {"desc_act", "sym", "do_fuse", "fuse_max_seq_len", "modules_to_fuse"}
# AutoAWQ's GEMM packing puts output column ``8 c + ORDER[i]`` in bits ``4 i`` of word ``c``
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


class AwqQuantizer(GptqQuantizer):
    """``quant_method: "awq"``: AutoAWQ GEMM checkpoints, kept packed as int4 where the group size is a multiple
    of 32 dividing the layer's inputs (else de-quantised; see the module docstring).

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
        return f"AWQ 4-bit GEMM checkpoint (group {self.group_size}), kept packed as int4 where the kernels take it"

    def weight_shape(self, qweight_shape: tuple[int, ...]) -> tuple[int, int]:
        rows, cols = qweight_shape
        return cols * 8, rows

    def integers(
        self, stem: str, parts: Mapping[str, torch.Tensor], where: str
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
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
        return q, zeros, scales, torch.arange(k) // self.group_size


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
        # stems kept packed (keep()): their int4 tensors (key -> (stem, part)), converted once per layer
        self._int4: dict[str, tuple[str, str]] = {}
        self._groups: dict[str, int] = {}
        self._pending: dict[str, dict[str, torch.Tensor]] = {}

    def keep(self, stem: str, group: int) -> None:
        """Read layer ``stem`` as int4 tensors (``qweight``/``scales``/``mins``, group ``group``), not a float weight."""
        weight = f"{stem}.weight"
        del self._derived[weight]
        self._groups[stem] = group
        for part in INT4_PARTS:
            self._int4[f"{stem}.{part}"] = (stem, part)
        self._keys = [k for k in self._keys if k != weight] + [f"{stem}.{part}" for part in INT4_PARTS]
        self._key_set = set(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._key_set

    def _parts(self, stem: str) -> dict[str, torch.Tensor]:
        return {p: self.source[f"{stem}.{p}"] for p in PACKED_PARTS if f"{stem}.{p}" in self.source}

    def __getitem__(self, key: str) -> torch.Tensor:
        kept = self._int4.get(key)
        if kept is not None:
            stem, part = kept
            pending = self._pending.get(stem)
            if pending is None:
                pending = self.quantizer.int4_parts(stem, self._parts(stem), self.where, self._groups[stem])
                self._pending[stem] = pending
            tensor = pending.pop(part)
            if not pending:
                del self._pending[stem]
            return tensor
        stem = self._derived.get(key)
        if stem is None:
            return self.source[key]
        return self.quantizer.unpack(stem, self._parts(stem), self.where)

    def shape_of(self, key: str) -> tuple[int, ...]:
        kept = self._int4.get(key)
        if kept is not None:
            stem, part = kept
            n, k = self._shapes[f"{stem}.weight"]
            return (n, k // 2) if part == "qweight" else (n, k // self._groups[stem])
        shape = self._shapes.get(key)
        return shape if shape is not None else _shape(self.source, key)

    def file_of(self, key: str) -> Any:
        stem = self._int4[key][0] if key in self._int4 else self._derived.get(key)
        file_of = getattr(self.source, "file_of", None)
        if file_of is None:
            return None
        return file_of(f"{stem}.qweight" if stem is not None else key)

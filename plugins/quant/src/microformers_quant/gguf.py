"""``quant_method: "gguf"``: load a GGUF file keeping its quantized blocks.

Block types and what they become (values are exactly the file's, no re-quantisation):

- ``Q4_0`` (``d * (q - 8)``): q4, group 32, scale ``d``, min ``-8 d`` (exact in float16);
- ``Q4_1`` (``d * q + m``): q4, group 32, scale ``d``, min ``m``;
- ``Q8_0`` (``d * q``): q8, group 32, scale ``d``.

Other quantized types (``Q5_0``, ``Q5_1``, ``Q2_K`` ... ``Q6_K``) have no kernel here: they are
de-quantised with microformers-gguf and re-quantised to group-32 int8 (symmetric), which keeps
their memory saving and adds at most half an int8 step per value (documented drift, see
docs/quantization.md). Float tensors (norms, F16/F32 weights) stay float. A type microformers-gguf
cannot read is an error naming the tensor.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

from microformers.errors import CheckpointError, ConfigError

from .quantizers import PluginQuantizer

Q4_0, Q4_1, Q8_0 = "Q4_0", "Q4_1", "Q8_0"


class GgufBlockSource(Mapping[str, torch.Tensor]):
    """A GGUF file's tensors under Hugging Face names; quantized 2-D weights as ``<stem>.qweight/.scales[/.mins]``."""

    def __init__(self, gguf: Any, dtype: torch.dtype) -> None:
        from gguf.constants import GGMLQuantizationType

        from microformers_gguf import PLAIN, SUPPORTED_TYPES, TensorPlan, is_supported

        self.gguf, self.dtype = gguf, dtype
        self.plan = TensorPlan(gguf)
        # key -> (tensor info, layout, part, HF name); layout "float" loads through the plan's transforms
        self.entries: dict[str, tuple[Any, str, str, str]] = {}
        self.row_order: dict[str, Any] = {}  # HF name -> row permutation for kept blocks
        self._last_read: tuple[str, torch.Tensor] | None = None  # one tensor's blocks serve its 2-3 parts
        for hf in self.plan.entries:
            for info in self.plan.infos(hf):
                if not is_supported(info.type_id):
                    raise CheckpointError(
                        f"GGUF file {gguf.path}: tensor '{info.name}' uses block type {info.type_name}, which "
                        "neither microformers-quant nor microformers-gguf can read (readable: "
                        f"{', '.join(SUPPORTED_TYPES)})"
                    )
            simple = self.plan.row_permutation(hf)
            info = self.plan.infos(hf)[0]
            kind = GGMLQuantizationType(info.type_id)
            stem, _, leaf = hf.rpartition(".")
            if simple is None or kind in PLAIN or len(info.shape) != 2 or leaf != "weight" or info.shape[1] % 32:
                self.entries[hf] = (info, "float", "", hf)
                continue
            self.row_order[hf] = simple[1]
            layout = {Q4_0: "q4_0", Q4_1: "q4_1", Q8_0: "q8_0"}.get(kind.name, "requant")
            parts = ("qweight", "scales", "mins") if layout.startswith("q4") else ("qweight", "scales")
            for part in parts:
                self.entries[f"{stem}.{part}"] = (info, layout, part, hf)

    def kept_weights(self) -> list[str]:
        """The Hugging Face names of the weights whose blocks are kept (read as ``qweight``/``scales``[/``mins``])."""
        return sorted({entry[3] for entry in self.entries.values() if entry[1] != "float"})

    def read_as_float(self, hf: str) -> None:
        """Read weight ``hf`` de-quantised to the load dtype under its own name instead of as kept blocks."""
        parts = [key for key, entry in self.entries.items() if entry[3] == hf and entry[1] != "float"]
        info = self.entries[parts[0]][0]
        for key in parts:
            del self.entries[key]
        self.row_order.pop(hf, None)
        self.entries[hf] = (info, "float", "", hf)

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def file_of(self, key: str) -> Any:
        return self.gguf.path

    def shape_of(self, key: str) -> tuple[int, ...]:
        info, layout, part, hf = self.entries[key]
        rows, cols = (*info.shape, 1)[:2]
        if layout == "float":
            return self.plan.shape(hf)
        if part == "qweight":
            return (rows, cols // 2) if layout.startswith("q4") else (rows, cols)
        return (rows, cols // 32)

    def _raw_rows(self, info: Any, hf: str) -> torch.Tensor:
        """One tensor's blocks, read from the file into private memory (rows in Hugging Face order).

        Read, not viewed through the memory map: mapped pages a process has touched count in its
        resident memory until the map is closed, so viewing would hold the whole file resident next
        to the kept copies (measured: 98 MB more peak RSS for SmolLM2's Q4_1 file).
        """
        if self._last_read is not None and self._last_read[0] == hf:
            return self._last_read[1]
        raw = torch.empty(info.nbytes, dtype=torch.uint8)
        with open(self.gguf.path, "rb", buffering=0) as handle:
            handle.seek(info.offset)
            got = handle.readinto(memoryview(raw.numpy()))
        if got != info.nbytes:
            raise CheckpointError(
                f"GGUF file {self.gguf.path}: tensor '{info.name}' ends past the end of the file (it changed "
                "while loading?); load it again"
            )
        raw = raw.view(info.shape[0], -1)
        perm = self.row_order.get(hf)
        raw = raw if perm is None else raw.index_select(0, perm)
        self._last_read = (hf, raw)
        return raw

    def __getitem__(self, key: str) -> torch.Tensor:
        info, layout, part, hf = self.entries[key]
        if layout == "float":
            return self.plan.load(hf, self.dtype)
        rows, cols = info.shape
        groups = cols // 32
        if layout == "requant":
            return _requantize_q8(self, info, hf, rows, cols)[part]
        size = {"q4_0": 18, "q4_1": 20, "q8_0": 34}[layout]
        blocks = self._raw_rows(info, hf).view(rows, groups, size)
        d = blocks[:, :, 0:2].contiguous().view(torch.float16).view(rows, groups)
        if layout == "q8_0":
            if part == "scales":
                return d.float()
            return blocks[:, :, 2:34].contiguous().view(torch.int8).view(rows, cols)
        start = 2 if layout == "q4_0" else 4
        if part == "qweight":
            return blocks[:, :, start : start + 16].contiguous().view(rows, cols // 2)
        if part == "scales":
            return d
        if layout == "q4_1":
            return blocks[:, :, 2:4].contiguous().view(torch.float16).view(rows, groups)
        mins = d.float() * -8.0  # Q4_0: d * (q - 8) = d * q - 8 d
        if not torch.isfinite(mins.half()).all():
            raise CheckpointError(f"GGUF tensor '{info.name}': a Q4_0 scale is too large to map onto int4 (-8 d)")
        return mins.half()


def _requantize_q8(source: GgufBlockSource, info: Any, hf: str, rows: int, cols: int) -> dict[str, torch.Tensor]:
    from microformers_gguf import dequantize

    weight = dequantize(source._raw_rows(info, hf).reshape(-1), info.type_id, (rows, cols), torch.float32)
    w = weight.view(rows, cols // 32, 32)
    scales = w.abs().amax(-1) / 127.0
    q = torch.round(w / scales.clamp_min(1e-12).unsqueeze(-1)).clamp_(-127, 127).to(torch.int8)
    return {"qweight": q.view(rows, cols), "scales": scales}


class GgufQuantizer(PluginQuantizer):
    quant_method = "gguf"
    description = "GGUF blocks kept: Q4_0/Q4_1 as group-32 int4, Q8_0 as group-32 int8, int16 activations"
    # integer dot products as llama.cpp computes them, at int16's precision (activations="float32" for float)
    default_activations = "int16"

    def open_source(self, fmt: Any, files: list[Any], dtype: torch.dtype) -> Mapping[str, Any]:
        if getattr(fmt, "name", None) == "gguf":
            from microformers_gguf import open_gguf

            return GgufBlockSource(open_gguf(files[0]), dtype)
        source = fmt.load(files, dtype=dtype)
        if not any(key.endswith(".qweight") for key in source):
            raise ConfigError(
                f"quant_method 'gguf' keeps the blocks of a GGUF file, but {files[0]} is a float checkpoint: pass "
                "gguf_file=... to load a GGUF file, or use quant_method 'int4'/'int8' for this one"
            )
        return source  # a folder saved from a gguf-quantized model: layouts come from its tensors

    def layout_for(self, name: str, module: Any, is_head: bool) -> None:
        return None  # whatever the file holds as float stays float

    def match_source_to_modules(self) -> None:
        """A module that stays float (an untied embedding, a layer in ``modules_to_not_convert``) reads its kept
        blocks de-quantised as ``weight``: it has no ``qweight``/``scales`` to fill."""
        from microformers_sdk.quantization import module_for

        if isinstance(self.source, GgufBlockSource):
            for hf in self.source.kept_weights():
                if module_for(hf.rpartition(".")[0], self.converted, self.prefix) is None:
                    self.source.read_as_float(hf)

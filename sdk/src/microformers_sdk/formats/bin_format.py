"""Legacy PyTorch pickle weights (``pytorch_model.bin``): only with ``use_safetensors=False``.

Loaded with ``torch.load(weights_only=True)``, so a pickle cannot run code.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from microformers.builtin.safetensors_format import variant_name
from microformers.configuration import read_json
from microformers.errors import CheckpointError, FileMissingError
from microformers.weights import FormatRefused

WEIGHTS_NAME = "pytorch_model.bin"
INDEX_NAME = "pytorch_model.bin.index.json"


class PytorchBinFormat:
    name = "pytorch_bin"
    arguments = ("use_safetensors", "variant")
    expected = f"{WEIGHTS_NAME} with use_safetensors=False"

    def patterns(self, use_safetensors: bool | None = None, **_: Any) -> list[str]:
        return ["*.bin"] if use_safetensors is False else []

    def find(
        self, folder: Path, use_safetensors: bool | None = None, variant: str | None = None, **_: Any
    ) -> list[Path] | None:
        index = folder / variant_name(INDEX_NAME, variant)
        single = folder / variant_name(WEIGHTS_NAME, variant)
        if not (index.is_file() or single.is_file()):
            return None
        if use_safetensors is not False:
            raise FormatRefused(
                f"{folder} only has legacy pickle weights ({INDEX_NAME if index.is_file() else WEIGHTS_NAME}); "
                "pass use_safetensors=False to load them (read with torch.load(weights_only=True))."
            )
        if index.is_file():
            weight_map = read_json(index, what="pytorch shard index").get("weight_map", {})
            shards = sorted(set(weight_map.values()))
            for shard in shards:
                if not (folder / shard).is_file():
                    raise FileMissingError(f"shard {shard} named in {index} is missing from {folder}")
            return [folder / s for s in shards]
        return [single]

    def load(self, files: list[Path], **_: Any) -> Mapping[str, Any]:
        import torch

        state: dict[str, Any] = {}
        for path in files:
            try:
                state.update(torch.load(path, map_location="cpu", weights_only=True, mmap=True))
            except Exception as exc:
                raise CheckpointError(f"cannot read {path} as PyTorch weights (weights_only=True): {exc}") from exc
        return state


PYTORCH_BIN = PytorchBinFormat()

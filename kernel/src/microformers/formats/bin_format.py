"""Legacy PyTorch pickle weights (``pytorch_model.bin``), read when a folder has no safetensors weights.

As in the reference: loaded when nothing safer is there (or with ``use_safetensors=False``), refused with
``use_safetensors=True``. Read with ``torch.load(weights_only=True)``, so a pickle cannot run code. Written by
``save_pretrained(safe_serialization=False)``: ``torch.save`` of the state dict (tied copies left out,
as in every save), sharded by ``max_shard_size`` into ``pytorch_model-00001-of-0000N.bin`` with
``pytorch_model.bin.index.json``, the names and index layout of transformers 4.x.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..configuration import read_json
from ..errors import CheckpointError, FileMissingError
from ..weights import FormatRefused
from . import save_sharded
from .safetensors_format import variant_name

WEIGHTS_NAME = "pytorch_model.bin"
INDEX_NAME = "pytorch_model.bin.index.json"


class PytorchBinFormat:
    name = "pytorch_bin"
    arguments = ("use_safetensors", "variant")
    expected = WEIGHTS_NAME
    safe = False  # the format save_pretrained(safe_serialization=False) writes
    replaces = (WEIGHTS_NAME, "pytorch_model-?????-of-?????.bin", INDEX_NAME)

    def patterns(self, use_safetensors: bool | None = None, **_: Any) -> list[str]:
        # fetched from a hub only when asked for: most repositories hold both formats
        return ["*.bin"] if use_safetensors is False else []

    def find(
        self, folder: Path, use_safetensors: bool | None = None, variant: str | None = None, **_: Any
    ) -> list[Path] | None:
        index = folder / variant_name(INDEX_NAME, variant)
        single = folder / variant_name(WEIGHTS_NAME, variant)
        if not (index.is_file() or single.is_file()):
            return None
        if use_safetensors is True:
            raise FormatRefused(
                f"{folder} only has legacy pickle weights ({INDEX_NAME if index.is_file() else WEIGHTS_NAME}) and "
                "use_safetensors=True was passed; drop it to load them (read with torch.load(weights_only=True))."
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

    def save(
        self, state_dict: Mapping[str, Any], folder: Path, max_shard_size: int | str, metadata: dict[str, str]
    ) -> list[str]:
        import torch

        def write(tensors: dict[str, Any], path: Path) -> None:
            # a view of a larger tensor would pickle that tensor's whole storage: store its own values
            def own(t: Any) -> Any:
                return t.clone() if t.untyped_storage().nbytes() > t.numel() * t.element_size() else t

            torch.save({name: own(t) for name, t in tensors.items()}, path)

        return save_sharded(state_dict, folder, max_shard_size, WEIGHTS_NAME, INDEX_NAME, write)


PYTORCH_BIN = PytorchBinFormat()

"""safetensors: single-file and sharded (``model.safetensors.index.json``), memory-mapped."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..configuration import read_json
from ..errors import CheckpointError, FileMissingError
from ..hub import umask
from . import save_sharded

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"

# Bytes of a cache line on the CPUs the kernels target.
CACHE_LINE = 64
# The dtypes (safetensors' names) read into fresh memory where the file puts a tensor off a cache line: float32, the
# dtype of the SDK's own products (torch's half-precision products pack their operands first)
_READ_ALIGNED = ("F32",)


def tensor_entries(path: Path) -> dict[str, tuple[int, str, tuple[int, ...]]]:
    """Tensor name -> (its first byte's offset in the file, its dtype's safetensors name, its shape), from the header
    of safetensors file ``path``; a CheckpointError where the header cannot be read."""
    try:
        with open(path, "rb") as file:
            length = int.from_bytes(file.read(8), "little")
            if length > os.path.getsize(path) - 8:
                raise ValueError(f"a header of {length} bytes in a file of {os.path.getsize(path)}")
            header = json.loads(file.read(length))
        start = 8 + length
        return {
            name: (start + int(entry["data_offsets"][0]), entry["dtype"], tuple(entry["shape"]))
            for name, entry in header.items()
            if name != "__metadata__"
        }
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise CheckpointError(f"{path} has no readable safetensors header ({exc}); re-save the checkpoint") from exc


def read_bytes_into(path: Path, offset: int, buffer: Any) -> int:
    """Fill ``buffer`` (a contiguous CPU tensor) with its size in bytes of ``path`` from ``offset``; returns the bytes
    read (fewer where the file ends first)."""
    import torch

    with open(path, "rb") as file:
        file.seek(offset)
        return file.readinto(buffer.view(-1).view(torch.uint8).numpy())


class LazySafetensors(Mapping[str, Any]):
    """Tensor name -> tensor, read from the memory-mapped files only when asked for.

    A float32 tensor the file puts off a cache line is read into fresh memory instead of used in place:
    safetensors places tensors at any 8-byte offset after its header (every weight of SmolLM2's file at byte 40 of
    a line), and a view of the mapped file starting there makes every 16-float vector load of its rows straddle two
    lines; the SDK's products over a prompt took 98 GFLOP/s on such weights and 131 on line-aligned ones (one
    Emerald Rapids core). Reading them costs one pass over the file at load and keeps them in the process's own
    memory rather than the shared page cache.
    """

    def __init__(self, files: list[Path]) -> None:
        from safetensors import safe_open

        self._handles: dict[Path, Any] = {}
        self._where: dict[str, Path] = {}
        self._entries: dict[Path, dict[str, tuple[int, str, tuple[int, ...]]]] = {}
        for path in files:
            try:
                handle = safe_open(str(path), framework="pt")
                names = list(handle.keys())
            except Exception as exc:
                raise CheckpointError(
                    f"{path} is not a readable safetensors file ({exc}); it is truncated or corrupted. "
                    "Re-download or re-save the checkpoint."
                ) from exc
            self._handles[path] = handle
            for name in names:
                self._where[name] = path

    def file_of(self, name: str) -> Path:
        return self._where[name]

    def __getitem__(self, name: str) -> Any:
        path = self._where[name]
        try:
            tensor = self._handles[path].get_tensor(name)
            if tensor.device.type != "cpu" or tensor.data_ptr() % CACHE_LINE == 0 or sys.byteorder != "little":
                return tensor
            entries = self._entries.get(path)
            if entries is None:
                entries = self._entries[path] = tensor_entries(path)
            offset, dtype, _ = entries[name]
            return tensor if dtype not in _READ_ALIGNED else _read_into_fresh_memory(path, offset, tensor)
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(f"cannot read tensor '{name}' from {path}: {exc}") from exc

    def get_slice(self, name: str) -> Any:
        """The memory-mapped tensor ``name``, indexable (``[a:b]``, ``[:, a:b]``) to read only that part."""
        return self._handles[self._where[name]].get_slice(name)

    def shape_of(self, name: str) -> tuple[int, ...]:
        return tuple(self._handles[self._where[name]].get_slice(name).get_shape())

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def _read_into_fresh_memory(path: Path, offset: int, mapped: Any) -> Any:
    """A line-aligned copy of ``mapped`` (a view of ``path``'s mapping) read from the file at ``offset``, so that
    the mapped pages are never touched (a copy from the mapping would hold both until the load ends)."""
    import torch

    fresh = torch.empty(mapped.shape, dtype=mapped.dtype)  # torch's CPU allocator aligns to 64 bytes or more
    size = fresh.numel() * fresh.element_size()
    if size == 0:
        return fresh
    read = read_bytes_into(path, offset, fresh)
    if read != size:
        raise CheckpointError(f"{path} ends inside a tensor ({read} of {size} bytes); re-download or re-save it")
    return fresh


def variant_name(name: str, variant: str | None) -> str:
    """``model.safetensors`` -> ``model.fp16.safetensors``; ``x.index.json`` -> ``x.index.fp16.json``."""
    if not variant:
        return name
    stem, _, suffix = name.rpartition(".")
    return f"{stem}.{variant}.{suffix}"


def _plain_file_name(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name


class SafetensorsFormat:
    name = "safetensors"
    arguments = ("use_safetensors", "variant")
    expected = f"{WEIGHTS_NAME}, or {INDEX_NAME} with its shards"
    # files of an old checkpoint that a save replaces (never carried over: no stale shards)
    replaces = (WEIGHTS_NAME, "model-?????-of-?????.safetensors", INDEX_NAME)

    def patterns(self, use_safetensors: bool | None = None, **_: Any) -> list[str]:
        return [] if use_safetensors is False else ["*.safetensors"]

    def find(
        self, folder: Path, use_safetensors: bool | None = None, variant: str | None = None, **_: Any
    ) -> list[Path] | None:
        if use_safetensors is False:
            return None
        index = folder / variant_name(INDEX_NAME, variant)
        if index.is_file():
            weight_map = read_json(index, what="safetensors shard index").get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{index} has no 'weight_map' object; re-save the checkpoint")
            bad = [v for k, v in weight_map.items() if not isinstance(k, str) or not _plain_file_name(v)]
            if bad:
                raise CheckpointError(
                    f"{index} names shard {bad[0]!r}: weight_map values must be shard file names in the same folder "
                    "(no paths, no '..'); the index is corrupt or hostile. Re-save or re-download the checkpoint."
                )
            shards = sorted(set(weight_map.values()))
            for shard in shards:
                if not (folder / shard).is_file():
                    raise FileMissingError(
                        f"shard {shard} named in {index} is missing from {folder}; download or copy all shards"
                    )
            return [folder / s for s in shards]
        single = folder / variant_name(WEIGHTS_NAME, variant)
        return [single] if single.is_file() else None

    def load(self, files: list[Path], **_: Any) -> LazySafetensors:
        return LazySafetensors(files)

    def shapes(self, files: list[Path]) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape, from the headers only."""
        source = LazySafetensors(files)
        return {name: source.shape_of(name) for name in source}

    def save(
        self, state_dict: Mapping[str, Any], folder: Path, max_shard_size: int | str, metadata: dict[str, str]
    ) -> list[str]:
        from safetensors.torch import save_file

        def write(tensors: dict[str, Any], path: Path) -> None:
            save_file(tensors, str(path), metadata=metadata)
            os.chmod(path, 0o666 & ~umask())  # safetensors writes 0600; the reference's are 0644

        return save_sharded(state_dict, folder, max_shard_size, WEIGHTS_NAME, INDEX_NAME, write)


SAFETENSORS = SafetensorsFormat()

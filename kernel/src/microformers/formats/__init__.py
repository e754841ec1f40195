"""The checkpoint formats the kernel itself owns, and the sharding they share.

The kernel's built-in plugin (``microformers.builtin.plugin``, entry point ``core``) registers them through
``register_checkpoint_formats`` like any other format, so a plugin may add formats (GGUF) or override these.
``safetensors_format.SAFETENSORS`` (priority 100) is what ``save_pretrained`` writes;
``bin_format.PYTORCH_BIN`` reads legacy ``pytorch_model.bin`` checkpoints (only with
``use_safetensors=False``) and writes them for ``save_pretrained(safe_serialization=False)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS.update({"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40})


def parse_size(size: int | str) -> int:
    """``"5GB"`` -> 5_000_000_000; ``"10MiB"`` -> 10_485_760; ints pass through."""
    if isinstance(size, int):
        return size
    match = _SIZE.match(str(size))
    if not match:
        raise ConfigError(f"max_shard_size={size!r} is not a size; use bytes or a string like '500MB' or '5GB'")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "").upper()])


def plan_shards(sizes: Mapping[str, int], max_shard_size: int) -> list[list[str]]:
    """Group tensor names, in order, into shards of at most ``max_shard_size`` bytes (a larger tensor gets its own)."""
    shards: list[list[str]] = [[]]
    current = 0
    for name, size in sizes.items():
        if shards[-1] and current + size > max_shard_size:
            shards.append([])
            current = 0
        shards[-1].append(name)
        current += size
    return shards


def shard_file_names(stem: str, suffix: str, count: int) -> list[str]:
    """HF names: ``model.safetensors`` alone, else ``model-00001-of-00003.safetensors`` ..."""
    if count == 1:
        return [f"{stem}{suffix}"]
    return [f"{stem}-{i:05d}-of-{count:05d}{suffix}" for i in range(1, count + 1)]


def save_sharded(
    state_dict: Mapping[str, Any],
    folder: Path,
    max_shard_size: int | str,
    file_name: str,
    index_name: str,
    write: Callable[[dict[str, Any], Path], None],
) -> list[str]:
    """Split ``state_dict`` into shards of at most ``max_shard_size`` and ``write(tensors, path)`` each.

    ``file_name`` (``model.safetensors``) names a single file; several get ``model-00001-of-00002.safetensors``
    ... and an ``index_name`` file ``{"metadata": {"total_size": bytes}, "weight_map": {tensor: shard}}``.
    Returns the names written.
    """
    sizes = {name: t.numel() * t.element_size() for name, t in state_dict.items()}
    shards = plan_shards(sizes, parse_size(max_shard_size))
    stem, dot, suffix = file_name.partition(".")
    names = shard_file_names(stem, dot + suffix, len(shards))
    weight_map: dict[str, str] = {}
    for name, shard in zip(names, shards):
        write({k: state_dict[k].detach().contiguous() for k in shard}, folder / name)
        weight_map.update(dict.fromkeys(shard, name))
    if len(names) == 1:
        return names
    index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
    (folder / index_name).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return [*names, index_name]

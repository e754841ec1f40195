"""Checkpoint files: picking the registered format for a folder, shard planning, size parsing.

Formats themselves (safetensors, legacy ``.bin``, GGUF ...) are plugins; see
``hookspecs.register_checkpoint_formats`` for what a format object offers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError, FileMissingError
from .plugins import Registration, registry

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


class FormatRefused(Exception):
    """Raised by a format's ``find`` when its files are there but need the user's opt-in."""


def find_checkpoint(folder: Path, **kwargs: Any) -> tuple[Registration, list[Path]]:
    """The highest-priority registered format that finds weights in ``folder``, and its files."""
    formats = sorted(registry.all("checkpoint_formats"), key=lambda r: -int(r.meta.get("priority", 0)))
    refusals: list[str] = []
    for reg in formats:
        fmt = reg.load()
        try:
            files = fmt.find(folder, **kwargs)
        except FormatRefused as refusal:
            refusals.append(str(refusal))
            continue
        if files:
            return reg, list(files)
    hint = " ".join(refusals) or (
        "Expected model.safetensors or model.safetensors.index.json with its shards"
        f" (formats installed: {', '.join(r.name for r in formats) or 'none'})."
    )
    raise FileMissingError(f"no model weights found in {folder}. {hint}")

"""Checkpoints: the one path that opens a model source for loading, shard planning, size parsing.

Formats themselves (safetensors, legacy ``.bin``, GGUF ...) are plugins; see
``hookspecs.register_checkpoint_formats`` for what a format object offers. The kernel names none.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .errors import ConfigError, FileMissingError
from .hub import resolve_folder, split_hub_kwargs
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


def formats() -> list[tuple[Registration, Any]]:
    """Every registered checkpoint format (registration, loaded object), highest priority first."""
    regs = sorted(registry.all("checkpoint_formats"), key=lambda r: -int(r.meta.get("priority", 0)))
    return [(reg, reg.load()) for reg in regs]


def format_arguments() -> set[str]:
    """The keyword arguments some format reads (``arguments``); they go to formats, never to configs."""
    return {name for _, fmt in formats() for name in getattr(fmt, "arguments", ())}


def resolve_source(pretrained: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Turn a registered model alias (``register_model_sources``) into a folder and its loading kwargs."""
    if isinstance(pretrained, (str, os.PathLike)) and not Path(pretrained).exists():
        reg = registry.get("model_sources", str(pretrained))
        if reg is not None:
            path, source_kwargs = reg.load()()
            return path, {**source_kwargs, **kwargs}
    return pretrained, kwargs


@attrs.define
class Checkpoint:
    """A model source opened for loading: the format arguments are read once, the files found once.

    ``AutoConfig``, ``AutoTokenizer`` and ``from_pretrained`` all take one in place of a path, so the
    Auto classes resolve a checkpoint once and hand it on.
    """

    source: Any
    hub_kwargs: dict[str, Any]
    format_kwargs: dict[str, Any]
    candidates: list[tuple[Registration, Any]]
    explicit: bool
    _found: tuple[Path, Registration, list[Path]] | None = attrs.field(default=None, alias="_found")

    def __str__(self) -> str:
        return str(self.source)

    def resolve(self) -> tuple[Path, Registration, list[Path]]:
        """(folder, format registration, weight files); fetched from the Hub the first time if needed."""
        if self._found is None:
            patterns = list(METADATA_PATTERNS)
            for _, fmt in self.candidates:
                patterns += getattr(fmt, "patterns", lambda **_: [])(**self.format_kwargs)
            folder = resolve_folder(self.source, patterns, **self.hub_kwargs)
            self._found = (folder, *_find(folder, self.candidates, self.format_kwargs))
        return self._found

    def carried(self, what: str) -> Any:
        """What the weights file itself carries (``"config"`` or ``"tokenizer_files"``), else ``None``.

        Only a format chosen by its own argument (``gguf_file=...``) is asked before the weights are
        found, so reading a config never downloads the weights of an ordinary checkpoint.
        """
        if not (self.explicit or self._found is not None):
            return None
        _, reg, files = self.resolve()
        method = getattr(reg.load(), f"load_{what}", None)
        return None if method is None else method(files)


METADATA_PATTERNS = ("*.json", "*.jinja")


def open_checkpoint(pretrained: Any, kwargs: dict[str, Any]) -> tuple[Checkpoint, dict[str, Any]]:
    """Open ``pretrained`` (folder, Hub id, alias or an open ``Checkpoint``); returns it and the other kwargs.

    A format named by one of its ``selected_by`` arguments (``gguf_file=...``) is the only candidate,
    whatever the priorities; otherwise every format is tried by descending priority.
    """
    if not isinstance(pretrained, Checkpoint):
        pretrained, kwargs = resolve_source(pretrained, kwargs)
    hub_kwargs, rest = split_hub_kwargs(kwargs)
    candidates = formats()
    arguments = {name for _, fmt in candidates for name in getattr(fmt, "arguments", ())}
    format_kwargs = {name: rest.pop(name) for name in list(rest) if name in arguments}
    if isinstance(pretrained, Checkpoint):  # already open: its own arguments stand
        return pretrained, rest
    chosen = [
        (reg, fmt)
        for reg, fmt in candidates
        if any(format_kwargs.get(name) not in (None, False) for name in getattr(fmt, "selected_by", ()))
    ]
    return Checkpoint(pretrained, hub_kwargs, format_kwargs, chosen or candidates, bool(chosen)), rest


def _find(folder: Path, candidates: list[tuple[Registration, Any]], kwargs: dict[str, Any]) -> tuple[Registration, list[Path]]:
    refusals: list[str] = []
    for reg, fmt in candidates:
        try:
            files = fmt.find(folder, **kwargs)
        except FormatRefused as refusal:
            refusals.append(str(refusal))
            continue
        if files:
            return reg, list(files)
    expected = "; ".join(getattr(fmt, "expected", reg.name) for reg, fmt in candidates)
    hint = " ".join(refusals) or f"Expected: {expected or 'an installed checkpoint format'}."
    raise FileMissingError(f"no model weights found in {folder}. {hint}")


def save_format() -> Any:
    """The format ``save_pretrained`` writes: the highest-priority one that can save."""
    for _, fmt in formats():
        if hasattr(fmt, "save"):
            return fmt
    raise registry.missing_error("checkpoint_formats", "safetensors", what="checkpoint format that can save")

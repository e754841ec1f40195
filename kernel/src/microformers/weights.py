"""Checkpoints: the one path that opens a model source for loading, and the choice of the format a save writes.

Formats are registered (``hookspecs.register_checkpoint_formats``); what the kernel calls on one is
``protocols.CheckpointFormat`` (and ``SavingFormat``, ``ShapedFormat``, ``CarryingFormat``). The kernel's own
safetensors and legacy ``.bin`` formats (:mod:`microformers.formats`) are registered by its built-in plugin
like any other, and are chosen here by priority, never by name.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import attrs

from .errors import FileMissingError
from .hub import resolve_folder, split_hub_kwargs
from .plugins import Registration, registry
from .protocols import CheckpointFormat, SavingFormat


class FormatRefused(Exception):
    """Raised by a format's ``find`` when its files are there but need the user's opt-in."""


def formats() -> list[tuple[Registration, CheckpointFormat]]:
    """Every registered checkpoint format (registration, loaded object), highest priority first."""
    regs = sorted(registry.all("checkpoint_formats"), key=lambda r: -int(r.meta.get("priority", 0)))
    return [(reg, reg.load()) for reg in regs]


def format_arguments() -> set[str]:
    """The keyword arguments some format reads (``arguments``); they go to formats, never to configs."""
    return {name for _, fmt in formats() for name in getattr(fmt, "arguments", ())}


def resolve_source(pretrained: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Turn a registered model alias (``register_model_sources``) into a folder and its loading kwargs."""
    if isinstance(pretrained, (str, os.PathLike)) and not Path(pretrained).exists():
        name = str(pretrained)
        reg = registry.get("model_sources", name) or (
            registry.get("model_sources", name.lower()) if "/" not in name else None  # aliases are lower case
        )
        if reg is not None:
            path, source_kwargs = reg.load()()
            return path, {**source_kwargs, **kwargs}
        _refuse_alias_typo(name)
    return pretrained, kwargs


def _refuse_alias_typo(name: str) -> None:
    """A name without an owner ('org/') that is one slip from an installed alias is a typo, not a Hub repo."""
    if "/" in name or os.sep in name:
        return
    close = difflib.get_close_matches(name.lower(), registry.names("model_sources"), n=1, cutoff=0.85)
    if close:
        raise FileMissingError(
            f"'{name}' is neither a folder nor an installed model alias; did you mean '{close[0]}'? "
            "(a Hub repo is named 'owner/name')"
        )


@attrs.define
class Checkpoint:
    """A model source opened for loading: the format arguments are read once, the files found once.

    ``AutoConfig``, ``AutoTokenizer`` and ``from_pretrained`` all take one in place of a path, so the
    Auto classes resolve a checkpoint once and hand it on.
    """

    source: Any
    hub_kwargs: dict[str, Any]
    format_kwargs: dict[str, Any]
    candidates: list[tuple[Registration, CheckpointFormat]]
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


def _find(folder: Path, candidates: list[tuple[Registration, CheckpointFormat]], kwargs: dict[str, Any]) -> tuple[Registration, list[Path]]:
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


def save_format(safe: bool = True) -> tuple[SavingFormat, list[str]]:
    """The format ``save_pretrained`` writes and the file globs the save supersedes.

    The format is the highest-priority one that can save whose ``safe`` (default true; a pickle format
    sets false) equals ``safe_serialization``. A save supersedes the weight files of every format
    (``replaces``), so no older weights stay beside the new ones, whichever format a later load picks.
    """
    candidates = formats()
    replaces = [glob for _, fmt in candidates for glob in getattr(fmt, "replaces", ())]
    for _, fmt in candidates:
        if hasattr(fmt, "save") and bool(getattr(fmt, "safe", True)) == bool(safe):
            return fmt, replaces
    what = "checkpoint format that can save" + ("" if safe else " without safe_serialization")
    raise registry.missing_error("checkpoint_formats", "safetensors" if safe else "pytorch_bin", what=what)

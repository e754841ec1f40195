"""Helpers for mapping checkpoint tensor names onto a model's parameter names.

The kernel loads a checkpoint whose names equal the model's (bridging a missing or extra
``base_model_prefix``). When a family's files use other names (legacy ``LayerNorm.gamma``, a
``transformer.`` prefix, ...), a model overrides ``_checkpoint_key_map`` and builds the mapping with a
:class:`KeyRenamer`::

    RENAMES = KeyRenamer([(r"\\.gamma$", ".weight"), (r"\\.beta$", ".bias")])

    def _checkpoint_key_map(self, checkpoint_keys):
        mapping = super()._checkpoint_key_map(checkpoint_keys)
        return RENAMES.extend_key_map(mapping, self.state_dict().keys(), checkpoint_keys)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from microformers.errors import CheckpointError


class KeyRenamer:
    """Ordered regex rules ``(pattern, replacement)`` from checkpoint names to model names."""

    def __init__(self, rules: Sequence[tuple[str, str]]) -> None:
        self.rules = [(re.compile(pattern), replacement) for pattern, replacement in rules]

    def rename(self, checkpoint_key: str) -> str:
        """The model name for one checkpoint name (every rule applied in order)."""
        for pattern, replacement in self.rules:
            checkpoint_key = pattern.sub(replacement, checkpoint_key)
        return checkpoint_key

    def rename_all(self, checkpoint_keys: Iterable[str]) -> dict[str, str]:
        """``{model name: checkpoint name}`` for the given checkpoint names."""
        return {self.rename(key): key for key in checkpoint_keys}

    def extend_key_map(
        self, mapping: Mapping[str, str], model_keys: Iterable[str], checkpoint_keys: Iterable[str]
    ) -> dict[str, str]:
        """Add renamed checkpoint names to ``mapping`` (model name -> checkpoint name) for model names it lacks."""
        renamed = self.rename_all(checkpoint_keys)
        result = dict(mapping)
        for name in model_keys:
            if name not in result and name in renamed:
                result[name] = renamed[name]
        return result


def layer_indices(keys: Iterable[str], pattern: str = r"\.layers\.(\d+)\.") -> set[int]:
    """The layer numbers that occur in tensor names (``model.layers.3.mlp...`` -> 3)."""
    compiled = re.compile(pattern)
    return {int(match.group(1)) for key in keys if (match := compiled.search(key))}


def check_checkpoint_keys(
    expected: Iterable[str], provided: Iterable[str], *, source: str, ignore: Iterable[str] = ()
) -> None:
    """Raise a ``CheckpointError`` naming the first missing tensors when ``provided`` lacks any of ``expected``."""
    provided_set = set(provided)
    ignored = set(ignore)
    missing = [key for key in expected if key not in provided_set and key not in ignored]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise CheckpointError(
            f"{source} is missing {len(missing)} tensor(s): {shown}. The checkpoint is incomplete or was made for "
            "a different configuration; re-download or re-export it."
        )

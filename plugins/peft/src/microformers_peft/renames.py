"""Module paths as the reference implementation names them, for models whose modules it renamed.

A model class may declare ``reference_module_renames``: ``(reference template, our template)`` pairs over dotted
module paths, most specific first, where ``{n}`` stands for a layer index — e.g. ViT's
``("layers.{n}.attention.q_proj", "encoder.layer.{n}.attention.attention.query")``. The reference (transformers
5) renamed some architectures' modules in memory while keeping the old names in its weight files; ``peft`` adapters
made on it use the new in-memory names. With the declaration, LoRA adapters load from either naming and are saved
under the reference's, so ``peft`` on the reference loads them.
"""

from __future__ import annotations

from typing import Any

import attrs
import regex

from microformers.errors import ConfigError

__all__ = ["ModuleRenames"]


def _compile(template: str, owner: str) -> regex.Pattern[str]:
    if not template or any(not part for part in template.split(".")):
        raise ConfigError(f"{owner}.reference_module_renames: {template!r} is not a dotted module path")
    body = regex.escape(template).replace(regex.escape("{n}"), r"(?P<n>\d+)")
    # whole path components only: "layers.0" must not match inside "sublayers.0" or "layers.01"
    return regex.compile(rf"(?<![^.]){body}(?![^.])")


@attrs.frozen
class _Rule:
    reference: str
    ours: str
    reference_pattern: regex.Pattern[str]
    our_pattern: regex.Pattern[str]


def _substitute(path: str, pattern: regex.Pattern[str], template: str) -> str | None:
    match = pattern.search(path)
    if match is None:
        return None
    index = match.groupdict().get("n")
    replacement = template.replace("{n}", index) if index is not None else template
    return path[: match.start()] + replacement + path[match.end() :]


@attrs.frozen
class ModuleRenames:
    """Translates dotted paths (module paths or tensor keys) between this model's names and the reference's."""

    rules: tuple[_Rule, ...]

    @classmethod
    def of(cls, model: Any) -> ModuleRenames | None:
        """The renames a model's class declares, or None."""
        declared = getattr(type(model), "reference_module_renames", None)
        if not declared:
            return None
        owner = type(model).__name__
        rules = []
        for pair in declared:
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise ConfigError(f"{owner}.reference_module_renames: {pair!r} is not a (reference, ours) pair")
            reference, ours = pair
            rules.append(_Rule(reference, ours, _compile(reference, owner), _compile(ours, owner)))
        return cls(tuple(rules))

    def to_reference(self, path: str) -> str:
        """Our path -> the reference's (the first rule that applies; unchanged when none does)."""
        for rule in self.rules:
            renamed = _substitute(path, rule.our_pattern, rule.reference)
            if renamed is not None:
                return renamed
        return path

    def from_reference(self, path: str) -> str:
        """The reference's path -> ours (unchanged when no rule applies, e.g. for a path already in our names)."""
        for rule in self.rules:
            renamed = _substitute(path, rule.reference_pattern, rule.ours)
            if renamed is not None:
                return renamed
        return path

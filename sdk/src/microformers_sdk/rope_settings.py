"""Rotary-embedding settings from ``config.json``, without importing torch (configs validate with it).

Checkpoints describe RoPE in one of two spellings, both accepted here:

* ``"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, ...}`` (older files;
  ``"type"`` instead of ``"rope_type"`` in the oldest), or
* ``"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, ...}``.

:func:`normalize_rope_settings` turns either into a :class:`RopeSettings`.

``longrope`` (Phi-3's LongRoPE; ``"su"`` is its legacy name) carries two lists of per-frequency
divisors, ``short_factor`` and ``long_factor`` (``rotary dim / 2`` numbers each): the short set
applies while a forward pass's longest position is within ``original_max_position_embeddings``,
the long set beyond it, and cos/sin are scaled by ``attention_factor`` (default
``sqrt(1 + ln(factor) / ln(original))`` with ``factor = max_position_embeddings / original``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs

from microformers.errors import ConfigError

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")

# Older names of supported types, as found in config.json files.
_ROPE_TYPE_ALIASES: dict[str, str] = {"su": "longrope"}

# Keys each scaling type must find in the rope settings (after defaults are applied).
_REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": (),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor"),
}


class RopeParametersMixin:
    """``config.rope_parameters``, the reference's current spelling, as a view over the classic one:
    ``rope_theta`` plus ``rope_scaling`` (plus ``partial_rotary_factor`` where the config has one).

    Setting it (a file written with ``rope_parameters``) converts back: ``rope_theta`` and, for configs that set
    :attr:`rope_parameters_take_partial_rotary_factor`, ``partial_rotary_factor`` move to their attributes; the
    rest becomes ``rope_scaling`` (``None`` for the default rotation)."""

    rope_parameters_take_partial_rotary_factor: ClassVar[bool] = False

    @property
    def rope_parameters(self) -> dict[str, Any]:
        scaling = dict(self.rope_scaling or {})  # type: ignore[attr-defined]
        rope_type = scaling.pop("rope_type", scaling.pop("type", "default"))
        merged: dict[str, Any] = {"rope_type": rope_type, "rope_theta": self.rope_theta}  # type: ignore[attr-defined]
        if getattr(self, "partial_rotary_factor", None) is not None:
            merged["partial_rotary_factor"] = self.partial_rotary_factor  # type: ignore[attr-defined]
        return {**merged, **scaling}

    @rope_parameters.setter
    def rope_parameters(self, value: dict[str, Any] | None) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise ConfigError(f"rope_parameters must be a JSON object, got {type(value).__name__}: {value!r}")
        scaling = dict(value)
        if "rope_theta" in scaling:
            self.rope_theta = scaling.pop("rope_theta")
        if self.rope_parameters_take_partial_rotary_factor and "partial_rotary_factor" in scaling:
            self.partial_rotary_factor = scaling.pop("partial_rotary_factor")
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        self.rope_scaling = None if rope_type == "default" and not set(scaling) - {"rope_type", "type"} else scaling


@attrs.frozen
class RopeSettings:
    """Everything needed to compute rotary frequencies, with defaults resolved."""

    rope_type: str
    theta: float
    dim: int
    max_position_embeddings: int
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None


def normalize_rope_settings(
    *,
    head_dim: int,
    max_position_embeddings: int,
    rope_theta: float | None = None,
    rope_scaling: dict[str, Any] | None = None,
    rope_parameters: dict[str, Any] | None = None,
    partial_rotary_factor: float | None = None,
    default_theta: float = 10000.0,
    setting: str = "rope_scaling",
    original_max_position_embeddings: int | None = None,
) -> RopeSettings:
    """Merge the two config spellings into :class:`RopeSettings`; errors name ``setting``.

    ``original_max_position_embeddings`` given here (a top-level config field, as Phi-3 has) takes
    priority over the one inside the rope settings for ``longrope``, as in the reference.
    """
    params: dict[str, Any] = {}
    for source in (rope_scaling, rope_parameters):
        if source is None:
            continue
        if not isinstance(source, dict):
            raise ConfigError(f"{setting} must be a JSON object (or null), got {type(source).__name__}: {source!r}")
        params.update(source)
    rope_type = params.get("rope_type", params.get("type")) or "default"
    rope_type = _ROPE_TYPE_ALIASES.get(rope_type, rope_type)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ConfigError(
            f"{setting}.rope_type={rope_type!r} is not supported; supported rotary scaling types are "
            f"{list(SUPPORTED_ROPE_TYPES)}"
        )
    theta = params.get("rope_theta", rope_theta)
    theta = default_theta if theta is None else theta
    partial = params.get("partial_rotary_factor", partial_rotary_factor)
    dim = int(head_dim * partial) if partial is not None else int(head_dim)
    if dim <= 0 or dim % 2:
        raise ConfigError(
            f"rotary dimension {dim} (head_dim={head_dim}, partial_rotary_factor={partial}) must be a positive even "
            "number; fix head_dim or partial_rotary_factor in config.json"
        )
    missing = [key for key in _REQUIRED_KEYS[rope_type] if params.get(key) is None]
    if missing:
        raise ConfigError(f"{setting} with rope_type={rope_type!r} needs {missing}; add them to config.json")
    original = params.get("original_max_position_embeddings")
    if rope_type == "longrope" and original_max_position_embeddings is not None:
        original = original_max_position_embeddings
    if original is None and rope_type in ("yarn", "llama3", "longrope"):
        original = max_position_embeddings
    factor = params.get("factor")
    if rope_type in ("yarn", "longrope") and factor is None:
        factor = max_position_embeddings / original
    short_factor = long_factor = None
    attention_factor = params.get("attention_factor")
    if rope_type == "longrope":
        short_factor = _factor_list(params, "short_factor", dim, setting)
        long_factor = _factor_list(params, "long_factor", dim, setting)
        if attention_factor is None and factor > 1.0 and original < 2:
            raise ConfigError(
                f"{setting}: original_max_position_embeddings={original} leaves LongRoPE's default attention_factor "
                "undefined (it divides by ln(original)); set attention_factor or a larger original length"
            )
        if attention_factor is None:
            attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    for key, value in (("factor", factor), ("rope_theta", theta)):
        if value is not None and (not isinstance(value, int | float) or value <= 0):
            raise ConfigError(f"{setting}.{key}={value!r} must be a positive number")
    return RopeSettings(
        rope_type=rope_type,
        theta=float(theta),
        dim=dim,
        max_position_embeddings=int(max_position_embeddings),
        factor=None if factor is None else float(factor),
        original_max_position_embeddings=None if original is None else int(original),
        low_freq_factor=params.get("low_freq_factor"),
        high_freq_factor=params.get("high_freq_factor"),
        beta_fast=params.get("beta_fast"),
        beta_slow=params.get("beta_slow"),
        attention_factor=attention_factor,
        mscale=params.get("mscale"),
        mscale_all_dim=params.get("mscale_all_dim"),
        truncate=bool(params.get("truncate", True)),
        short_factor=short_factor,
        long_factor=long_factor,
    )


def _factor_list(params: dict[str, Any], key: str, dim: int, setting: str) -> tuple[float, ...]:
    """``longrope``'s ``short_factor`` / ``long_factor``: one positive number per rotary frequency."""
    value = params[key]
    if (
        not isinstance(value, list | tuple)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) and x > 0 for x in value)
        or len(value) != dim // 2
    ):
        shown = f"{len(value)} values" if isinstance(value, list | tuple) else repr(value)
        raise ConfigError(
            f"{setting}.{key} must be a list of {dim // 2} positive numbers (rotary dimension {dim} / 2), got "
            f"{shown}; fix config.json"
        )
    return tuple(float(x) for x in value)


def rope_settings_from_config(config: Any, head_dim: int | None = None) -> RopeSettings:
    """:class:`RopeSettings` from a config with ``rope_theta``/``rope_scaling`` or ``rope_parameters``."""
    if head_dim is None:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return normalize_rope_settings(
        head_dim=head_dim,
        max_position_embeddings=config.max_position_embeddings,
        rope_theta=getattr(config, "rope_theta", None),
        rope_scaling=getattr(config, "rope_scaling", None),
        rope_parameters=getattr(config, "rope_parameters", None),
        partial_rotary_factor=getattr(config, "partial_rotary_factor", None),
        original_max_position_embeddings=getattr(config, "original_max_position_embeddings", None),
    )


def merged_rope_parameters(
    rope_theta: float | None,
    rope_scaling: dict[str, Any] | None,
    rope_parameters: dict[str, Any] | None,
    default_theta: float,
) -> dict[str, Any]:
    """A config's ``rope_parameters`` from either spelling: ``rope_theta`` (or ``default_theta``) and
    ``rope_scaling`` first, then anything ``rope_parameters`` sets."""
    return {
        "rope_type": "default",
        "rope_theta": default_theta if rope_theta is None else rope_theta,
        **(rope_scaling or {}),
        **(rope_parameters or {}),
    }


def check_config_rope_parameters(config: Any, max_position_embeddings: int) -> RopeSettings:
    """Check ``config.rope_parameters`` against the config's ``attention_head_dim``; errors name the config."""
    return normalize_rope_settings(
        head_dim=config.attention_head_dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters=config.rope_parameters,
        setting=f"{type(config).__name__}.rope_parameters",
    )

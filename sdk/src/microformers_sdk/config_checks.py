"""Checks a plugin's ``PretrainedConfig.__init__`` runs on its fields (imports no torch).

A bad ``config.json`` is refused with a ``ConfigError`` naming the field and the file (``from_pretrained``
adds the path), instead of a shape error deep inside the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from microformers.errors import ConfigError

__all__ = ["check_attention_heads", "check_choice", "check_heads_divide", "check_positive_ints"]


def check_positive_ints(config: Any, names: Iterable[str]) -> None:
    """Each field in ``names`` is an ``int`` (not a ``bool``) above zero."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(
                f"{name}={value!r} in {type(config).__name__} must be a positive integer; fix config.json"
            )


def check_heads_divide(config: Any, size: str = "hidden_size", heads: str = "num_attention_heads") -> None:
    """``size`` is a multiple of ``heads``, so every head gets ``size / heads`` dimensions."""
    size_value, heads_value = getattr(config, size), getattr(config, heads)
    if size_value % heads_value:
        raise ConfigError(
            f"{size}={size_value} is not a multiple of {heads}={heads_value} in {type(config).__name__}; fix "
            f"config.json so each head gets {size} / {heads} dimensions"
        )


def check_choice(config: Any, name: str, supported: Iterable[str], distribution: str) -> None:
    """The field's value is one ``distribution`` implements."""
    supported = tuple(supported)
    value = getattr(config, name)
    if value not in supported:
        raise ConfigError(
            f"{name}={value!r} in {type(config).__name__} is not supported by {distribution} "
            f"(supported: {', '.join(supported)})"
        )


def check_attention_heads(config: Any, head_dim: Any) -> None:
    """A grouped-query decoder's sizes: positive counts, heads that split ``hidden_size`` (unless
    ``head_dim`` is set, then a positive integer), and query heads shared evenly by the key/value heads."""
    check_positive_ints(
        config,
        (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
        ),
    )
    if head_dim is None and config.hidden_size % config.num_attention_heads:
        raise ConfigError(
            f"hidden_size={config.hidden_size} is not divisible by num_attention_heads={config.num_attention_heads}; "
            "fix one of them in config.json (or set head_dim explicitly)"
        )
    if head_dim is not None and (isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0):
        raise ConfigError(f"head_dim={head_dim!r} must be a positive integer; fix config.json")
    if config.num_attention_heads % config.num_key_value_heads:
        raise ConfigError(
            f"num_attention_heads={config.num_attention_heads} is not a multiple of "
            f"num_key_value_heads={config.num_key_value_heads}; grouped-query attention needs every key/value head "
            "to serve the same number of query heads. Fix config.json"
        )

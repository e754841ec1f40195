"""``microformers_sdk.rope_settings`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from microformers import ConfigError
from microformers_sdk.rope_settings import RopeSettings, normalize_rope_settings, rope_settings_from_config


def _norm(**kwargs: object) -> RopeSettings:
    return normalize_rope_settings(**{"head_dim": 8, "max_position_embeddings": 32, **kwargs})


def test_defaults_theta_and_no_original_length_for_plain_rope() -> None:
    settings = _norm()
    assert settings.theta == 10000.0 and settings.dim == 8 and settings.original_max_position_embeddings is None
    assert settings.truncate is True


def test_a_settings_value_that_is_not_an_object_is_named_with_its_type() -> None:
    with pytest.raises(ConfigError) as info:
        _norm(rope_scaling=[1], setting="rope_parameters")
    assert str(info.value) == "rope_parameters must be a JSON object (or null), got list: [1]"


def test_partial_rotary_factor_from_the_settings_or_the_argument() -> None:
    assert _norm(rope_parameters={"rope_type": "default", "partial_rotary_factor": 0.5}).dim == 4
    assert _norm(partial_rotary_factor=0.25).dim == 2
    with pytest.raises(ConfigError) as info:
        _norm(head_dim=6, partial_rotary_factor=0.5)
    assert str(info.value) == (
        "rotary dimension 3 (head_dim=6, partial_rotary_factor=0.5) must be a positive even number; "
        "fix head_dim or partial_rotary_factor in config.json"
    )


def test_yarn_keeps_its_own_fields_and_the_original_length() -> None:
    settings = _norm(
        rope_scaling={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 8,
            "beta_fast": 16,
            "mscale": 0.7,
            "mscale_all_dim": 0.5,
            "truncate": False,
        }
    )
    assert settings.original_max_position_embeddings == 8 and settings.beta_fast == 16
    assert settings.mscale_all_dim == 0.5 and settings.truncate is False
    assert _norm(rope_scaling={"rope_type": "yarn", "factor": 2.0}).original_max_position_embeddings == 32


def test_llama3_keeps_its_frequency_factors() -> None:
    settings = _norm(
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        }
    )
    assert settings.low_freq_factor == 1.0 and settings.high_freq_factor == 4.0


def test_longrope_with_a_tiny_original_length_needs_an_attention_factor() -> None:
    with pytest.raises(ConfigError) as info:
        _norm(
            rope_scaling={
                "rope_type": "longrope",
                "short_factor": [1.0] * 4,
                "long_factor": [2.0] * 4,
                "original_max_position_embeddings": 1,
            }
        )
    assert str(info.value) == (
        "rope_scaling: original_max_position_embeddings=1 leaves LongRoPE's default attention_factor undefined "
        "(it divides by ln(original)); set attention_factor or a larger original length"
    )


def test_settings_from_a_config_object() -> None:
    config = SimpleNamespace(
        hidden_size=32,
        num_attention_heads=4,
        max_position_embeddings=64,
        partial_rotary_factor=0.5,
        original_max_position_embeddings=16,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 2, "long_factor": [2.0] * 2},
    )
    settings = rope_settings_from_config(config)
    assert settings.dim == 4 and settings.original_max_position_embeddings == 16  # head_dim 32 / 4 = 8, halved
    plain = SimpleNamespace(hidden_size=32, num_attention_heads=4, max_position_embeddings=64)
    assert rope_settings_from_config(plain).dim == 8
    assert rope_settings_from_config(plain, head_dim=16).dim == 16  # an explicit head size wins

"""``microformers_sdk.rope_settings``: each scaling type's settings from a config, compared whole."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from microformers import ConfigError
from microformers_sdk.rope_settings import (
    RopeParametersMixin,
    RopeSettings,
    normalize_rope_settings,
    rope_settings_from_config,
)

# From test_rope_settings_full_mutants.py: ``microformers_sdk.rope_settings`` behaviour the full mutation run found
# unasserted (docs/reliability.md). Each scaling type's settings are compared whole, so every field a config carries
# is checked to arrive in :class:`RopeSettings`; the errors are compared whole, so each names the setting, the key
# and the fix.


def _norm(**kwargs: Any) -> RopeSettings:
    return normalize_rope_settings(**{"head_dim": 8, "max_position_embeddings": 32, **kwargs})


def _refused(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        _norm(**kwargs)
    return str(info.value)


def test_yarn_settings_arrive_whole() -> None:
    yarn = {
        "rope_type": "yarn",
        "factor": 4,
        "original_max_position_embeddings": 8,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "attention_factor": 0.9,
        "mscale": 0.7,
        "mscale_all_dim": 0.5,
        "truncate": 0,
    }
    assert _norm(rope_theta=500, rope_scaling=yarn) == RopeSettings(
        rope_type="yarn",
        theta=500.0,
        dim=8,
        max_position_embeddings=32,
        factor=4.0,
        original_max_position_embeddings=8,
        beta_fast=16.0,
        beta_slow=2.0,
        attention_factor=0.9,
        mscale=0.7,
        mscale_all_dim=0.5,
        truncate=False,
    )
    settings = _norm(rope_scaling=yarn)
    assert isinstance(settings.theta, float) and isinstance(settings.factor, float)
    # without a factor, YaRN's is the context extension over the original length
    assert _norm(rope_scaling={"rope_type": "yarn", "original_max_position_embeddings": 8}).factor == 4.0


def test_llama3_settings_arrive_whole() -> None:
    llama3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    expected = RopeSettings(
        rope_type="llama3",
        theta=500000.0,
        dim=8,
        max_position_embeddings=32,
        factor=8.0,
        original_max_position_embeddings=16,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
    )
    assert _norm(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, **llama3}) == expected
    assert _norm(rope_theta=500000.0, rope_scaling={"type": "llama3", **llama3}) == expected
    # a top-level original length is LongRoPE's only: llama3 keeps the one in its settings
    assert (
        _norm(rope_theta=5e5, rope_scaling={"rope_type": "llama3", **llama3}, original_max_position_embeddings=4)
        == expected
    )
    # the original length defaults to max_position_embeddings for llama3 too
    without = {key: value for key, value in llama3.items() if key != "original_max_position_embeddings"}
    assert _norm(rope_scaling={"rope_type": "llama3", **without}).original_max_position_embeddings == 32


def test_linear_and_dynamic_have_no_original_length() -> None:
    for rope_type in ("linear", "dynamic"):
        assert _norm(rope_scaling={"rope_type": rope_type, "factor": 2}) == RopeSettings(
            rope_type=rope_type, theta=10000.0, dim=8, max_position_embeddings=32, factor=2.0
        )


def test_longrope_settings_arrive_whole() -> None:
    scaling = {"rope_type": "longrope", "short_factor": [1, 2], "long_factor": (3.0, 4.5)}
    settings = normalize_rope_settings(
        head_dim=4, max_position_embeddings=64, rope_scaling=scaling, original_max_position_embeddings=16
    )
    assert settings == RopeSettings(
        rope_type="longrope",
        theta=10000.0,
        dim=4,
        max_position_embeddings=64,
        factor=4.0,
        original_max_position_embeddings=16,
        attention_factor=math.sqrt(1 + math.log(4.0) / math.log(16)),
        short_factor=(1.0, 2.0),
        long_factor=(3.0, 4.5),
    )
    assert all(isinstance(x, float) for x in settings.short_factor or ())
    # the original length inside the settings counts when the config has none at the top level
    inside = _norm(rope_scaling={**scaling, "original_max_position_embeddings": 8}, head_dim=4)
    assert inside.original_max_position_embeddings == 8 and inside.factor == 4.0
    # no original length at all: the context is not extended, so the attention factor is 1
    plain = _norm(rope_scaling=scaling, head_dim=4)
    assert (plain.original_max_position_embeddings, plain.factor, plain.attention_factor) == (32, 1.0, 1.0)


def test_longrope_attention_factor_at_the_edges() -> None:
    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
    # an original length of 2 is the smallest with a defined default (ln 2 > 0)
    two = _norm(rope_scaling={**scaling, "original_max_position_embeddings": 2})
    assert two.attention_factor == pytest.approx(math.sqrt(1 + math.log(16) / math.log(2)))
    # a factor of 1 needs no logarithm: the factor is 1 even with an original length of 1
    one = normalize_rope_settings(
        head_dim=8, max_position_embeddings=1, rope_scaling=scaling, original_max_position_embeddings=1
    )
    assert (one.factor, one.attention_factor) == (1.0, 1.0)
    assert _norm(rope_scaling={**scaling, "factor": 1.0, "original_max_position_embeddings": 1}).attention_factor == 1.0
    # a factor just above 1 with an original length of 1 is refused as well, and a factor of 2 uses the formula
    with pytest.raises(ConfigError, match="original_max_position_embeddings=1 leaves"):
        normalize_rope_settings(
            head_dim=8, max_position_embeddings=2, rope_scaling=scaling, original_max_position_embeddings=1
        )
    doubled = _norm(rope_scaling={**scaling, "original_max_position_embeddings": 16})
    assert doubled.factor == 2.0 and doubled.attention_factor == pytest.approx(math.sqrt(1.25))
    # a given attention factor is kept even where the default would be undefined
    given = _norm(rope_scaling={**scaling, "original_max_position_embeddings": 1, "attention_factor": 1.5})
    assert given.attention_factor == 1.5


def test_rope_parameters_win_over_rope_scaling_and_theta_sources() -> None:
    settings = _norm(
        rope_theta=100.0,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        rope_parameters={"rope_type": "dynamic", "factor": 3.0, "rope_theta": 200.0},
    )
    assert (settings.rope_type, settings.factor, settings.theta) == ("dynamic", 3.0, 200.0)
    # rope_scaling alone, rope_parameters alone, and the default theta given by the caller
    assert _norm(rope_scaling=None, rope_parameters={"rope_type": "linear", "factor": 2.0}).factor == 2.0
    assert _norm(rope_scaling={"rope_type": "linear", "factor": 2.0}, rope_parameters=None).factor == 2.0
    assert _norm(rope_theta=None).theta == 10000.0
    assert _norm(default_theta=1e6).theta == 1e6
    assert _norm(rope_theta=50.0, default_theta=1e6).theta == 50.0
    assert _norm(rope_parameters={"rope_theta": 75.0}).rope_type == "default"
    assert _norm(rope_parameters={"rope_type": None, "type": "linear", "factor": 2.0}).rope_type == "default"


def test_unsupported_type_lists_the_supported_ones() -> None:
    assert _refused(rope_parameters={"rope_type": "banana"}, setting="rope_parameters") == (
        "rope_parameters.rope_type='banana' is not supported; supported rotary scaling types are "
        "['default', 'linear', 'dynamic', 'yarn', 'llama3', 'longrope']"
    )
    assert "rope_scaling.rope_type='ntk'" in _refused(rope_scaling={"type": "ntk"})


def test_missing_keys_are_named_with_the_setting() -> None:
    assert _refused(rope_scaling={"rope_type": "llama3", "factor": 8.0}) == (
        "rope_scaling with rope_type='llama3' needs ['low_freq_factor', 'high_freq_factor']; add them to config.json"
    )
    assert _refused(rope_parameters={"rope_type": "linear", "factor": None}, setting="rope_parameters") == (
        "rope_parameters with rope_type='linear' needs ['factor']; add them to config.json"
    )


@pytest.mark.parametrize(
    ("head_dim", "partial", "dim"), [(0, None, 0), (8, 0.0, 0), (1, None, 1), (6, 0.5, 3), (2, 0.5, 1)]
)
def test_rotary_dimension_must_be_positive_and_even(head_dim: int, partial: float | None, dim: int) -> None:
    message = _refused(head_dim=head_dim, partial_rotary_factor=partial)
    assert message == (
        f"rotary dimension {dim} (head_dim={head_dim}, partial_rotary_factor={partial}) must be a positive even "
        "number; fix head_dim or partial_rotary_factor in config.json"
    )


def test_smallest_rotary_dimensions_are_accepted() -> None:
    assert _norm(head_dim=2).dim == 2
    assert _norm(head_dim=12, partial_rotary_factor=0.5).dim == 6
    assert _norm(head_dim=12, rope_parameters={"partial_rotary_factor": 0.5}, partial_rotary_factor=1.0).dim == 6


@pytest.mark.parametrize(
    ("scaling", "key", "value"),
    [
        ({"rope_type": "linear", "factor": 0}, "factor", "0"),
        ({"rope_type": "linear", "factor": -2.0}, "factor", "-2.0"),
        ({"rope_type": "dynamic", "factor": "2"}, "factor", "'2'"),
        ({"rope_theta": 0.0}, "rope_theta", "0.0"),
        ({"rope_theta": "1e4"}, "rope_theta", "'1e4'"),
    ],
)
def test_factor_and_theta_must_be_positive_numbers(scaling: dict[str, Any], key: str, value: str) -> None:
    message = _refused(rope_parameters=scaling, setting="rope_parameters")
    assert message == f"rope_parameters.{key}={value} must be a positive number"


def test_a_tiny_factor_and_theta_are_accepted() -> None:
    settings = _norm(rope_parameters={"rope_type": "linear", "factor": 1e-3, "rope_theta": 1e-3})
    assert (settings.factor, settings.theta) == (1e-3, 1e-3)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ([1.0, 2.0, 3.0], "3 values"),
        ((1.0, 2.0, 3.0, 4.0, 5.0), "5 values"),
        ([1.0, 0.0, 1.0, 1.0], "4 values"),
        ([1.0, -1.0, 1.0, 1.0], "4 values"),
        ([1.0, True, 1.0, 1.0], "4 values"),
        ([1.0, None, 1.0, 1.0], "4 values"),
        ("1111", "'1111'"),
        (4, "4"),
    ],
)
def test_longrope_factor_lists_are_checked_whole(value: Any, shown: str) -> None:
    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": value}
    assert _refused(rope_scaling=scaling, setting="rope_scaling") == (
        f"rope_scaling.long_factor must be a list of 4 positive numbers (rotary dimension 8 / 2), got {shown}; "
        "fix config.json"
    )


def test_longrope_short_factor_errors_name_the_setting() -> None:
    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 2, "long_factor": [1.0] * 2}
    assert _refused(rope_parameters=scaling, setting="rope_parameters", head_dim=6) == (
        "rope_parameters.short_factor must be a list of 3 positive numbers (rotary dimension 6 / 2), got 2 values; "
        "fix config.json"
    )


def test_longrope_factor_lists_accept_small_positive_numbers() -> None:
    scaling = {"rope_type": "longrope", "short_factor": [1e-6, 1, 2, 3], "long_factor": (0.5,) * 4}
    settings = _norm(rope_scaling=scaling)
    assert settings.short_factor == (1e-6, 1.0, 2.0, 3.0) and settings.long_factor == (0.5,) * 4


def _config(**fields: Any) -> SimpleNamespace:
    return SimpleNamespace(**{"hidden_size": 32, "num_attention_heads": 4, "max_position_embeddings": 64, **fields})


def test_settings_from_a_config_read_every_field() -> None:
    config = _config(
        head_dim=16,
        rope_theta=500.0,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        rope_parameters={"factor": 4.0},
    )
    assert rope_settings_from_config(config) == RopeSettings(
        rope_type="linear", theta=500.0, dim=16, max_position_embeddings=64, factor=4.0
    )
    longrope = _config(
        original_max_position_embeddings=16,
        rope_scaling={
            "rope_type": "longrope",
            "short_factor": [1.0] * 4,
            "long_factor": [2.0] * 4,
            "original_max_position_embeddings": 32,
        },
    )
    assert rope_settings_from_config(longrope).original_max_position_embeddings == 16
    assert rope_settings_from_config(_config(head_dim=None)).dim == 8  # a null head_dim falls back
    assert rope_settings_from_config(_config(partial_rotary_factor=0.25)).dim == 2


def test_a_config_head_size_that_is_odd_is_named_as_a_whole_number() -> None:
    with pytest.raises(ConfigError) as info:
        rope_settings_from_config(_config(hidden_size=36, num_attention_heads=12))
    assert str(info.value).startswith("rotary dimension 3 (head_dim=3, partial_rotary_factor=None)")


# From test_rope_settings_mutants.py: ``microformers_sdk.rope_settings`` behaviour the mutation pass found
# unasserted (docs/reliability.md).


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


class _Classic(RopeParametersMixin):
    def __init__(self, rope_theta: float, rope_scaling: dict | None = None, partial: float | None = None) -> None:
        self.rope_theta, self.rope_scaling = rope_theta, rope_scaling
        if partial is not None:
            self.partial_rotary_factor = partial


class _Partial(_Classic):
    rope_parameters_take_partial_rotary_factor = True


def test_rope_parameters_view_merges_theta_scaling_and_partial_factor() -> None:
    config = _Classic(1e4, {"type": "linear", "factor": 2.0}, partial=0.5)
    assert config.rope_parameters == {
        "rope_type": "linear",
        "rope_theta": 1e4,
        "partial_rotary_factor": 0.5,
        "factor": 2.0,
    }
    assert _Classic(5e5).rope_parameters == {"rope_type": "default", "rope_theta": 5e5}


def test_setting_rope_parameters_converts_back_to_the_classic_spelling() -> None:
    config = _Classic(1e4)
    config.rope_parameters = {"rope_type": "default", "rope_theta": 2e4}
    assert (config.rope_theta, config.rope_scaling) == (2e4, None)
    config.rope_parameters = {"rope_type": "llama3", "rope_theta": 3e4, "factor": 8.0, "partial_rotary_factor": 0.5}
    # a config without partial rotary keeps the key where the file put it
    assert config.rope_scaling == {"rope_type": "llama3", "factor": 8.0, "partial_rotary_factor": 0.5}
    partial = _Partial(1e4)
    partial.rope_parameters = {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25}
    assert (partial.partial_rotary_factor, partial.rope_scaling) == (0.25, None)
    with pytest.raises(ConfigError, match="rope_parameters must be a JSON object"):
        partial.rope_parameters = [1]  # type: ignore[assignment]

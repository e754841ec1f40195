"""LongRoPE (``rope_type`` "longrope", legacy "su") in the SDK's rope settings and rotary embedding."""

from __future__ import annotations

import math

import pytest
import torch

from microformers.errors import ConfigError
from microformers_sdk.rope_settings import normalize_rope_settings
from microformers_sdk.rotary import RotaryEmbedding, compute_inv_freq

SHORT = [1.0, 1.5, 2.0, 4.0]
LONG = [2.0, 3.0, 5.0, 8.0]


def settings(**overrides: object) -> object:
    scaling = {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, **overrides}
    return normalize_rope_settings(
        head_dim=8, max_position_embeddings=64, rope_scaling=scaling, original_max_position_embeddings=16
    )


def test_su_is_longrope_and_defaults_follow_the_context_extension() -> None:
    legacy = normalize_rope_settings(
        head_dim=8,
        max_position_embeddings=64,
        rope_scaling={"type": "su", "short_factor": SHORT, "long_factor": LONG},
        original_max_position_embeddings=16,
    )
    assert legacy == settings()
    assert legacy.rope_type == "longrope"
    assert legacy.factor == 4.0
    assert legacy.attention_factor == pytest.approx(math.sqrt(1 + math.log(4.0) / math.log(16)))
    assert settings(attention_factor=1.25, factor=2.0).attention_factor == 1.25


def test_the_top_level_original_length_wins_over_the_one_in_the_scaling() -> None:
    assert settings(original_max_position_embeddings=32).original_max_position_embeddings == 16


@pytest.mark.parametrize(
    ("key", "value"), [("short_factor", [1.0, 2.0]), ("long_factor", [1.0, 2.0, 3.0, "x"]), ("long_factor", None)]
)
def test_bad_factor_lists_are_refused_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        settings(**{key: value})


def test_short_factors_within_the_original_length_long_ones_beyond() -> None:
    rope = settings()
    exponents = torch.arange(0, 8, 2, dtype=torch.float32) / 8
    short, scale = compute_inv_freq(rope)
    long, _ = compute_inv_freq(rope, seq_len=17)
    torch.testing.assert_close(short, 1.0 / (torch.tensor(SHORT) * 10000.0**exponents))
    torch.testing.assert_close(long, 1.0 / (torch.tensor(LONG) * 10000.0**exponents))
    embedding = RotaryEmbedding(rope)
    for last, expected in ((15, short), (16, long)):
        positions = torch.arange(last + 1)[None]
        cos, _ = embedding(positions)
        angles = positions[..., None].float() * expected
        torch.testing.assert_close(cos, torch.cat((angles, angles), -1).cos() * scale)

"""``microformers_sdk.rotary`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import math

import pytest
import torch

from microformers_sdk.rope_settings import RopeSettings
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb, compute_inv_freq, rotate_half


def _settings(**kwargs: object) -> RopeSettings:
    return RopeSettings(**{"rope_type": "default", "theta": 10000.0, "dim": 8, "max_position_embeddings": 16, **kwargs})


def test_yarn_attention_factor_with_mscale_and_mscale_all_dim() -> None:
    settings = _settings(rope_type="yarn", factor=4.0, original_max_position_embeddings=8, mscale=0.707, mscale_all_dim=0.5)
    _, scale = compute_inv_freq(settings)
    assert scale == pytest.approx((0.1 * 0.707 * math.log(4.0) + 1) / (0.1 * 0.5 * math.log(4.0) + 1))


def test_linear_scaling_divides_the_frequencies_and_leaves_cos_sin_unscaled() -> None:
    default, _ = compute_inv_freq(_settings())
    linear, scale = compute_inv_freq(_settings(rope_type="linear", factor=2.0))
    torch.testing.assert_close(linear, default / 2.0)
    assert scale == 1.0
    cos, _ = RotaryEmbedding(_settings(rope_type="linear", factor=2.0))(torch.zeros(1, 1, dtype=torch.long))
    # exact: cos(0) is exactly 1
    assert torch.equal(cos, torch.ones(1, 1, 8))


def test_dynamic_scaling_recomputes_the_frequencies_for_long_positions() -> None:
    settings = _settings(rope_type="dynamic", factor=2.0)
    rotary = RotaryEmbedding(settings)
    short = torch.arange(16)[None]
    cos, _ = rotary(short)
    torch.testing.assert_close(cos[0, :, :4], torch.cos(short[0, :, None].float() * compute_inv_freq(settings)[0]))
    long = torch.arange(40)[None]
    cos, sin = rotary(long)
    inv_freq = compute_inv_freq(settings, 40)[0]
    assert not torch.allclose(inv_freq, rotary.inv_freq)  # the base grew
    torch.testing.assert_close(cos[0, :, :4], torch.cos(long[0, :, None].float() * inv_freq))
    torch.testing.assert_close(sin[0, :, 4:], torch.sin(long[0, :, None].float() * inv_freq))


@pytest.mark.parametrize("head_dim", [8, 12])  # 12: partial rotary, the last 4 channels pass through
def test_query_and_key_are_both_rotated(head_dim: int) -> None:
    torch.manual_seed(0)
    query, key = torch.randn(1, 2, 3, head_dim), torch.randn(1, 1, 3, head_dim)
    cos, sin = RotaryEmbedding(_settings())(torch.arange(3)[None])
    q, k = apply_rotary_pos_emb(query, key, cos, sin)
    for original, rotated in ((query, q), (key, k)):
        part = original[..., :8]
        expected = part * cos[:, None] + rotate_half(part) * sin[:, None]
        torch.testing.assert_close(rotated[..., :8], expected)
        torch.testing.assert_close(rotated[..., 8:], original[..., 8:])

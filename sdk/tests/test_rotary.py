"""``microformers_sdk.rotary``: rotary frequencies and attention factors checked against the reference's
(``transformers``, a test oracle only), and applying the rotation."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from microformers import ConfigError
from microformers_sdk import native
from microformers_sdk.rope_settings import RopeSettings, rope_settings_from_config
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb, compute_inv_freq, rotate_half
from microformers_sdk.testing import needs_native_ops

# From test_rotary_full_mutants.py: ``microformers_sdk.rotary``: behaviour the fourth (full) mutation run found
# unasserted (docs/reliability.md, "Fourth pass"). Frequencies and attention factors are checked against the
# reference's (``transformers.modeling_rope_utils``, a test oracle only) over settings that reach every branch.


LONG = [1.0 + 0.25 * i for i in range(16)]


SHORT = [1.0 + 0.05 * i for i in range(16)]


CASES: list[tuple[dict[str, Any], int | None]] = [
    ({"rope_type": "default"}, None),
    (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 8, "beta_slow": 2},
        None,
    ),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, None),  # default betas
    ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32, "truncate": False}, None),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "mscale": 0.8}, None),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "attention_factor": 0.5}, None),
    ({"rope_type": "yarn", "factor": 1.0, "original_max_position_embeddings": 128}, None),  # scale 1
    (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 4, "beta_slow": 4},
        None,
    ),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "max": 16384}, None),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}, None),
    (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "max": 16384, "truncate": False},
        None,
    ),
    (
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 4,
            "beta_slow": 4,
            "max": 16384,
            "truncate": False,
        },
        None,
    ),
    (
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 16,
            "beta_slow": 2,
            "max": 16384,
            "head_dim": 128,
        },
        None,
    ),
    (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
        None,
    ),
    (
        {
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 2.0,
            "high_freq_factor": 8.0,
            "original_max_position_embeddings": 64,
        },
        None,
    ),
    ({"rope_type": "dynamic", "factor": 2.0}, 300),
    ({"rope_type": "dynamic", "factor": 3.0}, 129),
    ({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": 64}, 32),
    ({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": 64}, 64),
    ({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": 64}, 65),
]


def _configs(parameters: dict[str, Any]) -> tuple[Any, RopeSettings]:
    from transformers import LlamaConfig

    parameters = dict(parameters)
    longest, head_dim = parameters.pop("max", 128), parameters.pop("head_dim", 32)
    config = LlamaConfig(
        hidden_size=2 * head_dim, num_attention_heads=2, max_position_embeddings=longest,
        rope_parameters={"rope_theta": 10000.0, **parameters},
    )  # fmt: skip
    return config, rope_settings_from_config(config)


@pytest.mark.parametrize(("parameters", "seq_len"), CASES)
def test_frequencies_and_attention_factor_match_the_reference(parameters: dict[str, Any], seq_len: int | None) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config, settings = _configs(parameters)
    if parameters["rope_type"] == "default":
        reference, reference_factor = LlamaRotaryEmbedding.compute_default_rope_parameters(config, device="cpu")
    else:
        init = ROPE_INIT_FUNCTIONS[parameters["rope_type"]]
        reference, reference_factor = init(config, "cpu", seq_len=seq_len)
    ours, factor = compute_inv_freq(settings, seq_len)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, reference.float(), rtol=1e-6, atol=0)
    assert factor == pytest.approx(reference_factor, rel=1e-9)


def test_an_unknown_rope_type_lists_the_supported_ones() -> None:
    settings = RopeSettings(rope_type="spiral", theta=10000.0, dim=8, max_position_embeddings=16)
    with pytest.raises(ConfigError, match=r"^rope_type='spiral' is not supported; use one of \['default', "):
        compute_inv_freq(settings)


def test_longrope_switches_to_the_long_factors_past_the_original_length() -> None:
    _, settings = _configs(CASES[-1][0])
    rotary = RotaryEmbedding(settings)
    short_freq = compute_inv_freq(settings, 64)[0]
    long_freq = compute_inv_freq(settings, 65)[0]
    positions = torch.arange(64)[None]
    cos, _ = rotary(positions)
    torch.testing.assert_close(cos[0, :, :16], torch.cos(positions[0, :, None].float() * short_freq) * cos[0, 0, 0])
    positions = torch.arange(65)[None]
    cos, _ = rotary(positions)
    torch.testing.assert_close(cos[0, :, :16], torch.cos(positions[0, :, None].float() * long_freq) * cos[0, 0, 0])
    cos_again, _ = rotary(positions)  # cached: the same answer
    torch.testing.assert_close(cos_again, cos)


def test_dynamic_frequencies_change_only_past_the_maximum_length() -> None:
    _, settings = _configs({"rope_type": "dynamic", "factor": 2.0})
    rotary = RotaryEmbedding(settings)
    positions = torch.arange(128)[None]  # exactly max_position_embeddings: the original frequencies
    cos, _ = rotary(positions)
    torch.testing.assert_close(cos[0, :, :16], torch.cos(positions[0, :, None].float() * rotary.inv_freq))


def test_a_rotary_dimension_equal_to_the_head_dimension_rotates_every_channel() -> None:
    torch.manual_seed(0)
    settings = RopeSettings(rope_type="default", theta=10000.0, dim=8, max_position_embeddings=16)
    cos, sin = RotaryEmbedding(settings)(torch.arange(3)[None])
    query, key = torch.randn(1, 2, 3, 8), torch.randn(1, 1, 3, 8)
    q, k = apply_rotary_pos_emb(query, key, cos, sin)
    assert q.shape == query.shape and k.shape == key.shape
    half = torch.cat((-query[..., 4:], query[..., :4]), dim=-1)
    torch.testing.assert_close(q, query * cos[:, None] + half * sin[:, None])


# From test_rotary_mutants.py: ``microformers_sdk.rotary`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


def _settings(**kwargs: object) -> RopeSettings:
    return RopeSettings(**{"rope_type": "default", "theta": 10000.0, "dim": 8, "max_position_embeddings": 16, **kwargs})


def test_yarn_attention_factor_with_mscale_and_mscale_all_dim() -> None:
    settings = _settings(
        rope_type="yarn", factor=4.0, original_max_position_embeddings=8, mscale=0.707, mscale_all_dim=0.5
    )
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


@needs_native_ops()
def test_rotation_without_gradients_takes_the_native_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inference rotates queries and keys through the SDK's one-pass op, training through the formula (autograd
    records it); both give the same values."""
    calls = []
    real = native.rotate_half_split

    def counted(*args: torch.Tensor) -> torch.Tensor | None:
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(native, "rotate_half_split", counted)
    torch.manual_seed(0)
    cos, sin = RotaryEmbedding(_settings())(torch.arange(6).expand(2, 6))
    query, key = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8)
    with torch.no_grad():
        inferred = apply_rotary_pos_emb(query, key, cos, sin)
    assert calls == [query.shape, key.shape]
    trained = apply_rotary_pos_emb(query.requires_grad_(), key, cos, sin)
    assert len(calls) == 2 and trained[0].requires_grad
    for a, b in zip(inferred, trained):
        assert torch.equal(a, b.detach())  # exact: the same IEEE products and sums in the same order

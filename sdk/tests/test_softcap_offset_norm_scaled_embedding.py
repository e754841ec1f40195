"""SDK pieces added for Gemma: soft-capped attention, the (1 + weight) RMSNorm, scaled embeddings, masks per window."""

from __future__ import annotations

import math

import torch

from microformers_sdk.attention import eager_attention, sdpa_attention, soft_cap
from microformers_sdk.layers import OffsetRMSNorm, ScaledEmbedding
from microformers_sdk.masks import build_attention_mask, build_attention_masks


def test_soft_cap_squashes_and_none_is_identity() -> None:
    scores = torch.tensor([-100.0, -1.0, 0.0, 0.5, 100.0])
    capped = soft_cap(scores, 2.0)
    assert torch.allclose(capped, 2.0 * torch.tanh(scores / 2.0))
    assert float(capped.abs().max()) <= 2.0 and float(capped[1]) > -1.0
    assert soft_cap(scores, None) is scores


def test_eager_softcap_caps_scaled_scores_before_the_mask_and_sdpa_delegates() -> None:
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 5, 8, generator=generator) * 3
    key = torch.randn(2, 2, 5, 8, generator=generator) * 3
    value = torch.randn(2, 2, 5, 8, generator=generator)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    got = eager_attention(query, key, value, mask, scaling=0.3, softcap=1.5)
    keys, values = key.repeat_interleave(2, dim=1), value.repeat_interleave(2, dim=1)
    scores = 1.5 * torch.tanh(query @ keys.transpose(2, 3) * 0.3 / 1.5)
    want = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1) @ values
    assert torch.allclose(got, want, atol=1e-5)
    uncapped = eager_attention(query, key, value, mask, scaling=0.3)
    assert not torch.allclose(got, uncapped, atol=1e-2)
    through_sdpa = sdpa_attention(query, key, value, mask, scaling=0.3, softcap=1.5)
    assert torch.allclose(through_sdpa, got, atol=1e-6)


def test_offset_rms_norm_multiplies_by_one_plus_weight_in_float32() -> None:
    norm = OffsetRMSNorm(6, eps=1e-6)
    # exact: initialised to the constant zero
    assert torch.equal(norm.weight, torch.zeros(6))
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(-0.5, 0.5, 6))
    x = torch.randn(3, 6)
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + norm.weight)
    assert torch.allclose(norm(x), want, atol=1e-6)
    half = x.to(torch.bfloat16)
    got = norm.to(torch.bfloat16)(half)
    assert got.dtype == torch.bfloat16
    xf = half.float()
    exact = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + norm.weight.float())).to(torch.bfloat16)
    # exact: OffsetRMSNorm is these very ops on the same shapes
    assert torch.equal(got, exact)  # one rounding at the end, not before the weight


def test_scaled_embedding_rounds_the_scale_to_the_weight_dtype() -> None:
    embedding = ScaledEmbedding(10, 3072, padding_idx=0, embed_scale=3072**0.5)
    ids = torch.tensor([[1, 2]])
    assert torch.allclose(embedding(ids), embedding.weight[ids] * 3072**0.5)
    half = embedding.to(torch.bfloat16)
    # sqrt(3072) = 55.43 becomes 55.5 in bfloat16, as in the reference
    # exact: the same lookup times the same bfloat16 scale
    assert torch.equal(half(ids), half.weight[ids] * torch.tensor(55.5, dtype=torch.bfloat16))
    assert "embed_scale" not in dict(embedding.named_buffers()) and len(embedding.state_dict()) == 1


def test_build_attention_masks_one_per_window() -> None:
    padding = torch.tensor([[0, 1, 1, 1, 1, 1]])
    masks = build_attention_masks(padding, 6, 0, [3, None, 3, None])
    assert list(masks) == [3, None]
    for window in (3, None):
        expected = build_attention_mask(padding, 6, 0, sliding_window=window)
        # exact: the same mask-building code on the same inputs
        assert torch.equal(masks[window][0], expected[0])
    assert not torch.equal(masks[3][0], masks[None][0])

"""``microformers_sdk.static_steps`` on its own: when a step is static, what it sees, and its attention (the
decoders' static-cache tests compare whole generations)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from microformers_sdk.cache import DynamicCache, StaticCache
from microformers_sdk.static_steps import (
    DecoderLayerParts,
    DecoderStepShape,
    native_decoder_step,
    one_query_attention,
    static_step_position,
    visible_storage,
)

# From test_static_steps_mutants.py: ``microformers_sdk.static_steps`` on its own: when a step is static, what it
# sees, and its attention (the decoders' static-cache tests compare whole generations; docs/reliability.md, mutation
# testing).


def _filled(past: int = 3, capacity: int = 8, batch: int = 2, layers: int = 2) -> StaticCache:
    cache = StaticCache(max_cache_len=capacity)
    for layer in range(layers):
        cache.update(torch.randn(batch, 3, past, 4), torch.randn(batch, 3, past, 4), layer)  # 3 kv heads
    return cache


def test_static_step_position_only_for_one_token_into_a_static_cache_with_room() -> None:
    one = torch.zeros(2, 1, 8)
    with torch.no_grad():
        position = static_step_position(_filled(), one, (None, None), 2)
        assert position is not None and position.tolist() == [3] and position.dtype == torch.long
        assert static_step_position(_filled(), one, (8, 9), 2).tolist() == [3]  # windows as long as the storage
        assert static_step_position(_filled(past=7), one, (), 2).tolist() == [7]  # the last free position
        assert static_step_position(_filled(past=1, layers=1), one, (), 1).tolist() == [1]
        assert static_step_position(None, one, (), 2) is None
        dynamic = DynamicCache()
        dynamic.update(torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4), 0)
        assert static_step_position(dynamic, one, (), 1) is None
        assert static_step_position(_filled(), torch.zeros(2, 2, 8), (), 2) is None  # a prompt
        assert static_step_position(StaticCache(max_cache_len=8), one, (), 2) is None  # nothing prefilled
        assert static_step_position(_filled(past=8), one, (), 2) is None  # full
        assert static_step_position(_filled(), one, (), 3) is None  # not every layer filled
        assert static_step_position(_filled(), one, (None, 7), 2) is None  # a window shorter than the storage
        assert static_step_position(_filled(), torch.zeros(3, 1, 8), (), 2) is None  # another batch
    assert static_step_position(_filled(), one, (), 2) is None  # gradients on


def test_visible_storage_masks_future_positions_and_padding() -> None:
    embeds = torch.zeros(2, 1, 8)
    plain = visible_storage(6, 2, None, embeds)
    assert plain.shape == (1, 1, 1, 6) and plain.dtype == torch.bool
    assert plain.flatten().tolist() == [True, True, True, False, False, False]
    assert torch.equal(visible_storage(6, 2, torch.ones(2, 3), embeds), plain)
    assert torch.equal(visible_storage(6, 2, torch.ones(2, 1, 3, 3), embeds), plain)  # not a 2-D mask: ignored
    left_padded = torch.tensor([[0, 1, 1], [0, 0, 1]])
    seen = visible_storage(6, 2, left_padded, embeds)
    assert seen.shape == (2, 1, 1, 6)
    assert seen[0].flatten().tolist() == [False, True, True, False, False, False]
    assert seen[1].flatten().tolist() == [False, False, True, False, False, False]
    # a row with no real token yet sees every written position (never an all-masked softmax)
    not_started = visible_storage(6, 1, torch.tensor([[0, 0, 1], [1, 1, 1]]), embeds)
    assert not_started[0].flatten().tolist() == [True, True, False, False, False, False]
    assert not_started[1].flatten().tolist() == [True, True, False, False, False, False]


def test_one_query_attention_is_grouped_attention_over_the_visible_keys() -> None:
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 1, 3, generator=generator)
    keys = torch.randn(2, 2, 5, 3, generator=generator)
    values = torch.randn(2, 2, 5, 3, generator=generator)
    visible = torch.tensor([True, True, True, False, True]).view(1, 1, 1, 5)
    out = one_query_attention(query, keys, values, visible, 0.7)
    expanded_keys = keys.repeat_interleave(2, dim=1)
    expanded_values = values.repeat_interleave(2, dim=1)
    scores = (query @ expanded_keys.transpose(2, 3)) * 0.7
    scores = scores.masked_fill(~visible, float("-inf"))
    expected = torch.softmax(scores, dim=-1) @ expanded_values
    assert out.shape == (2, 4, 1, 3)
    torch.testing.assert_close(out, expected)
    half = one_query_attention(query.half(), keys.half(), values.half(), visible, 0.7)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), expected, atol=2e-3, rtol=2e-3)


class _NativeLinear(nn.Linear):
    built: list[tuple[Any, Any]] = []

    @staticmethod
    def native_decoder_step(layers: Any, shape: Any, final_norm: Any, lm_head: Any) -> Any:
        _NativeLinear.built.append((layers, shape, final_norm, lm_head))
        return "the step"


def _parts(linear: type[nn.Linear]) -> DecoderLayerParts:
    return DecoderLayerParts(*(linear(2, 2) if i not in (0, 5) else nn.Identity() for i in range(9)))


def test_native_decoder_step_asks_the_type_of_the_first_q_proj() -> None:
    shape = DecoderStepShape(heads=2, kv_heads=1, head_dim=4, scaling=0.5)
    assert native_decoder_step([], shape) is None
    assert native_decoder_step([_parts(nn.Linear)], shape) is None  # plain linears offer none
    layers = [_parts(_NativeLinear), _parts(nn.Linear)]
    assert native_decoder_step(layers, shape) == "the step"
    assert _NativeLinear.built == [(layers, shape, None, None)]
    norm, head = nn.Identity(), nn.Linear(2, 3)
    assert native_decoder_step(layers, shape, norm, head) == "the step"
    assert _NativeLinear.built[-1] == (layers, shape, norm, head)  # the head goes to the provider too
    for half in ((norm, None), (None, head)):
        with pytest.raises(ValueError, match="both final_norm and lm_head"):
            native_decoder_step(layers, shape, *half)
    parts = layers[0]
    assert parts.linears == (
        parts.q_proj,
        parts.k_proj,
        parts.v_proj,
        parts.o_proj,
        parts.gate_proj,
        parts.up_proj,
        parts.down_proj,
    )

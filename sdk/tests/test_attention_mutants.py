"""``microformers_sdk.attention`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from microformers import MicroformersError
from microformers_sdk import attention


def _qkv(q_len: int = 5, kv_len: int = 5, heads: int = 4, kv_heads: int = 2, dim: int = 8) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(2, heads, q_len, dim), torch.randn(2, kv_heads, kv_len, dim), torch.randn(2, kv_heads, kv_len, dim)


def test_this_torch_has_grouped_query_sdpa() -> None:
    assert attention._sdpa_supports_gqa() is True and attention._SDPA_HAS_GQA is True


def test_without_grouped_query_sdpa_the_key_value_heads_are_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = _qkv()
    expected = attention.eager_attention(q, k, v, None, is_causal=True)
    monkeypatch.setattr(attention, "_SDPA_HAS_GQA", False)  # torch < 2.5
    torch.testing.assert_close(attention.sdpa_attention(q, k, v, None, is_causal=True), expected)


def test_soft_capped_sdpa_runs_eager_attention_with_every_argument() -> None:
    q, k, v = _qkv(q_len=4, kv_len=4)
    out = attention.sdpa_attention(q, k, v, None, scaling=0.3, is_causal=True, softcap=2.0)
    expected = attention.eager_attention(q, k, v, None, scaling=0.3, is_causal=True, softcap=2.0)
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, attention.eager_attention(q, k, v, None, scaling=0.3, softcap=2.0))  # causal matters


def test_eager_attention_scales_by_the_inverse_square_root_of_the_head_size_by_default() -> None:
    q, k, v = _qkv(q_len=3, kv_len=6, dim=16)
    torch.testing.assert_close(attention.eager_attention(q, k, v, None), attention.eager_attention(q, k, v, None, scaling=0.25))


def test_the_implementation_name_falls_back_to_the_public_attribute_then_sdpa() -> None:
    assert attention.attention_implementation_name(SimpleNamespace(attn_implementation="eager")) == "eager"
    assert attention.attention_implementation_name(SimpleNamespace(_attn_implementation=None)) == "sdpa"


def test_an_unknown_implementation_is_named_in_the_error() -> None:
    with pytest.raises(MicroformersError) as info:
        attention.get_attention_function("no_such_attention")
    assert str(info.value).startswith("No installed plugin provides attention implementation 'no_such_attention'.")

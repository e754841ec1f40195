"""``microformers_sdk.attention``: eager attention against the plain formula and against SDPA, masks, scaling,
soft-capping, dropout and what the implementations are handed."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from microformers import MicroformersError
from microformers.plugins import Registry
from microformers_sdk import attention, native
from microformers_sdk.attention import eager_attention, sdpa_attention

# From test_attention_full_mutants.py: ``microformers_sdk.attention``: behaviour the full mutation run found
# unasserted (docs/reliability.md, "Mutation testing"). Eager attention is checked against the plain formula and
# against SDPA.


def _qkv(
    q_len: int, kv_len: int, heads: int = 4, kv_heads: int = 2, dim: int = 8, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(2, heads, q_len, dim, generator=generator),
        torch.randn(2, kv_heads, kv_len, dim, generator=generator),
        torch.randn(2, kv_heads, kv_len, dim, generator=generator),
    )


def _reference(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Softmax attention written out in float64, ``allowed`` a boolean mask broadcastable to the scores."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1).double(), value.repeat_interleave(group, dim=1).double()
    scores = query.double() @ key.transpose(2, 3) / math.sqrt(query.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    return (scores.softmax(-1) @ value).to(query.dtype)


def test_a_torch_without_grouped_query_sdpa_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    real = F.scaled_dot_product_attention

    def sdpa_before_2_5(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
    ) -> torch.Tensor:  # torch < 2.5 has no enable_gqa argument
        return real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)

    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa_before_2_5)
    assert attention._sdpa_supports_gqa() is False


@pytest.mark.parametrize("q_len", [2, 3])
@pytest.mark.parametrize("fn", [eager_attention, sdpa_attention])
def test_causal_attention_without_a_mask_for_short_prompts(fn: Any, q_len: int) -> None:
    query, key, value = _qkv(q_len, q_len)
    causal = torch.ones(q_len, q_len, dtype=torch.bool).tril()
    torch.testing.assert_close(fn(query, key, value, None, is_causal=True), _reference(query, key, value, causal))


def test_eager_causal_attention_aligns_the_queries_with_the_last_keys() -> None:
    """With a cache (more keys than queries), query ``i`` sees the keys up to ``kv_len - q_len + i``."""
    query, key, value = _qkv(2, 5)
    allowed = torch.ones(2, 5, dtype=torch.bool).tril(3)
    torch.testing.assert_close(
        eager_attention(query, key, value, None, is_causal=True), _reference(query, key, value, allowed)
    )


@pytest.mark.parametrize("fn", [eager_attention, sdpa_attention])
def test_an_additive_float_mask_is_added_to_the_scores(fn: Any) -> None:
    query, key, value = _qkv(4, 6)
    allowed = torch.rand(2, 1, 4, 6, generator=torch.Generator().manual_seed(1)) > 0.4
    allowed[..., 0] = True  # every row sees at least one key
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    want = _reference(query, key, value, allowed)
    torch.testing.assert_close(fn(query, key, value, additive), want)
    torch.testing.assert_close(fn(query, key, value, allowed), want)
    bias = torch.linspace(-1.0, 1.0, 6).view(1, 1, 1, 6)  # a soft bias changes the result, as added to the scores
    scores = query @ key.repeat_interleave(2, dim=1).transpose(2, 3) / math.sqrt(8) + bias
    expected = scores.softmax(-1) @ value.repeat_interleave(2, dim=1)
    torch.testing.assert_close(fn(query, key, value, bias), expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_eager_attention_in_half_precision_softmaxes_in_float32(dtype: torch.dtype) -> None:
    query, key, value = (t.to(dtype) for t in _qkv(5, 5, dim=16))
    output, weights = eager_attention(query, key, value, None, is_causal=True, return_weights=True)
    assert output.dtype == dtype and weights.dtype == dtype
    keys, values = key.repeat_interleave(2, dim=1), value.repeat_interleave(2, dim=1)
    scores = torch.matmul(query, keys.transpose(2, 3)) * 16**-0.5
    scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), torch.finfo(dtype).min)
    expected_weights = scores.float().softmax(-1).to(dtype)
    # exact: eager_attention is these very ops on the same shapes (repeat_kv copies like repeat_interleave)
    assert torch.equal(weights, expected_weights)
    assert torch.equal(output, torch.matmul(expected_weights, values))


def test_eager_attention_drops_weights_with_the_dropout_probability() -> None:
    query, key, value = _qkv(6, 6, dim=16)
    _, kept = eager_attention(query, key, value, None, return_weights=True)
    torch.manual_seed(0)
    output, dropped = eager_attention(query, key, value, None, dropout=0.25, return_weights=True)
    zeros = dropped == 0
    assert 0.15 < zeros.float().mean().item() < 0.35
    torch.testing.assert_close(dropped[~zeros], kept[~zeros] / 0.75)  # the rest scaled by 1 / (1 - p)
    repeated = value.repeat_interleave(2, dim=1)
    torch.testing.assert_close(output, dropped @ repeated)


def test_an_implementation_registered_under_a_builtin_name_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    import microformers.plugins

    def my_eager(*args: Any, **kwargs: Any) -> torch.Tensor:
        return eager_attention(*args, **kwargs)

    registry = Registry()
    registry.add("attention", "eager", my_eager)  # registered in this process: it wins over the SDK's
    monkeypatch.setattr(microformers.plugins, "registry", registry)
    assert attention.get_attention_function("eager") is my_eager
    assert attention.get_attention_function("sdpa") is sdpa_attention


def test_an_unknown_implementation_error_lists_the_installed_ones() -> None:
    with pytest.raises(MicroformersError) as info:
        attention.get_attention_function("no_such_attention")
    installed = str(info.value).split("Installed: ")[1]
    assert "eager" in installed and "sdpa" in installed


def test_soft_capped_sdpa_applies_the_dropout() -> None:
    query, key, value = _qkv(6, 6, dim=16)
    torch.manual_seed(0)
    want = eager_attention(query, key, value, None, dropout=0.25, softcap=2.0)
    torch.manual_seed(0)
    got = sdpa_attention(query, key, value, None, dropout=0.25, softcap=2.0)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, eager_attention(query, key, value, None, softcap=2.0))


def test_sdpa_uses_the_given_scaling() -> None:
    query, key, value = _qkv(4, 4)
    got = sdpa_attention(query, key, value, None, scaling=0.3)
    torch.testing.assert_close(got, eager_attention(query, key, value, None, scaling=0.3))
    assert not torch.allclose(got, sdpa_attention(query, key, value, None), atol=1e-3)


def test_sdpa_applies_the_dropout() -> None:
    query, key, value = _qkv(6, 6, dim=16)
    torch.manual_seed(0)
    first = sdpa_attention(query, key, value, None, dropout=0.25)
    torch.manual_seed(0)
    # exact: the same seed, kernel and shapes
    assert torch.equal(sdpa_attention(query, key, value, None, dropout=0.25), first)  # seeded: reproducible
    assert not torch.allclose(first, sdpa_attention(query, key, value, None), atol=1e-3)


@pytest.mark.parametrize("fn", [eager_attention, sdpa_attention])
def test_one_causal_query_sees_every_key(fn: Any) -> None:
    """A decoding step: the new token attends to the whole cache."""
    query, key, value = _qkv(1, 5)
    torch.testing.assert_close(fn(query, key, value, None, is_causal=True), _reference(query, key, value, None))


@pytest.mark.parametrize("fn", [eager_attention, sdpa_attention])
def test_query_heads_must_be_a_multiple_of_the_key_value_heads(fn: Any) -> None:
    query, key, value = _qkv(3, 3, heads=3, kv_heads=2)
    with pytest.raises(ValueError, match="^query has 3 heads, which is not a multiple of the 2 key/value heads$"):
        fn(query, key, value, None)


# From test_attention_mutants.py: ``microformers_sdk.attention`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


def _qkv_seeded_globally(
    q_len: int = 5, kv_len: int = 5, heads: int = 4, kv_heads: int = 2, dim: int = 8
) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return (
        torch.randn(2, heads, q_len, dim),
        torch.randn(2, kv_heads, kv_len, dim),
        torch.randn(2, kv_heads, kv_len, dim),
    )


def test_this_torch_has_grouped_query_sdpa() -> None:
    assert attention._sdpa_supports_gqa() is True and attention._SDPA_HAS_GQA is True


def test_without_grouped_query_sdpa_the_key_value_heads_are_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = _qkv_seeded_globally()
    expected = attention.eager_attention(q, k, v, None, is_causal=True)
    monkeypatch.setattr(attention, "_SDPA_HAS_GQA", False)  # torch < 2.5
    torch.testing.assert_close(attention.sdpa_attention(q, k, v, None, is_causal=True), expected)


def test_soft_capped_sdpa_runs_eager_attention_with_every_argument() -> None:
    q, k, v = _qkv_seeded_globally(q_len=4, kv_len=4)
    out = attention.sdpa_attention(q, k, v, None, scaling=0.3, is_causal=True, softcap=2.0)
    expected = attention.eager_attention(q, k, v, None, scaling=0.3, is_causal=True, softcap=2.0)
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, attention.eager_attention(q, k, v, None, scaling=0.3, softcap=2.0))  # causal matters


def test_eager_attention_scales_by_the_inverse_square_root_of_the_head_size_by_default() -> None:
    q, k, v = _qkv_seeded_globally(q_len=3, kv_len=6, dim=16)
    torch.testing.assert_close(
        attention.eager_attention(q, k, v, None), attention.eager_attention(q, k, v, None, scaling=0.25)
    )


def test_the_implementation_name_falls_back_to_the_public_attribute_then_sdpa() -> None:
    assert attention.attention_implementation_name(SimpleNamespace(attn_implementation="eager")) == "eager"
    assert attention.attention_implementation_name(SimpleNamespace(_attn_implementation=None)) == "sdpa"


def test_an_unknown_implementation_is_named_in_the_error() -> None:
    with pytest.raises(MicroformersError) as info:
        attention.get_attention_function("no_such_attention")
    assert str(info.value).startswith("No installed plugin provides attention implementation 'no_such_attention'.")


@pytest.mark.parametrize("q_len", [191, 192, 300, 1100, 1280])
def test_long_causal_prompts_attend_in_query_chunks_with_the_same_result(
    q_len: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From 192 to 1,279 queries, causal SDPA on the CPU runs in chunks of ``CAUSAL_CHUNK`` queries (to skip the
    key blocks above the diagonal that torch's kernel computes and masks); the result is causal attention."""
    query, key, value = _qkv(q_len, q_len, dim=16, seed=q_len)
    chunked: list[int] = []
    real = F.scaled_dot_product_attention

    def counted(q: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        chunked.append(q.shape[2])
        return real(q, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    out = sdpa_attention(query, key, value, None, is_causal=True)
    causal = torch.ones(q_len, q_len, dtype=torch.bool).tril()
    # tolerances: float32 softmax sums of up to 1,280 terms against a float64 reference
    torch.testing.assert_close(out, _reference(query, key, value, causal), rtol=1e-4, atol=1e-5)
    if not 192 <= q_len < 1280:
        assert chunked == [q_len]
    else:
        assert chunked == [
            min(attention.CAUSAL_CHUNK, q_len - start) for start in range(0, q_len, attention.CAUSAL_CHUNK)
        ]
        monkeypatch.setattr(F, "scaled_dot_product_attention", real)
        torch.testing.assert_close(out, real(query, key, value, is_causal=True, enable_gqa=True), rtol=1e-4, atol=1e-5)


def test_causal_prompts_with_dropout_or_a_cache_attend_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    real = F.scaled_dot_product_attention

    def counted(q: torch.Tensor, k: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append((q.shape[2], k.shape[2]))
        return real(q, k, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    query, key, value = _qkv(256, 260)
    sdpa_attention(query, key, value, None, is_causal=True)  # more keys than queries: a cache
    query, key, value = _qkv(256, 256)
    torch.manual_seed(0)
    sdpa_attention(query, key, value, None, is_causal=True, dropout=0.1)
    sdpa_attention(query, key, value, None, is_causal=False)
    assert calls == [(256, 260), (256, 256), (256, 256)]


needs_native_attention = pytest.mark.skipif(
    not native.wide_products_available(),
    reason="the native causal attention needs the native ops and a CPU with AVX-512 that torch uses (not this one)",
)


@needs_native_attention
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "q_len,heads,kv_heads,dim",
    [(1, 2, 2, 16), (17, 4, 2, 64), (33, 2, 1, 48), (64, 3, 1, 32), (65, 4, 4, 80), (300, 6, 2, 128)],
)
def test_native_causal_attention_is_causal_attention(q_len: int, heads: int, kv_heads: int, dim: int, threads: int) -> None:
    """Prompts shorter and longer than a block of 32 queries and of 64 keys, on their edges, head sizes of one to
    eight vectors (80: a block of values not a multiple of 64), grouped heads, queries laid out as a model's
    projections give them (tokens before heads), one or two threads: causal attention, as a float64 reference
    computes it."""
    query, key, value = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in _qkv(q_len, q_len, heads, kv_heads, dim))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = native.causal_attention(query, key, value, dim**-0.5)
    finally:
        torch.set_num_threads(previous)
    assert out is not None and out.shape == (2, heads, q_len, dim)
    causal = torch.ones(q_len, q_len, dtype=torch.bool).tril()
    # tolerances: float32 sums of up to 300 terms and a polynomial exp against a float64 reference
    torch.testing.assert_close(out, _reference(query, key, value, causal), rtol=1e-4, atol=1e-5)
    scaled = native.causal_attention(query, key, value, 0.3)
    assert scaled is not None
    torch.testing.assert_close(scaled, _reference(query * (0.3 * dim**0.5), key, value, causal), rtol=1e-4, atol=1e-5)


@needs_native_attention
@pytest.mark.parametrize("growth", [-3.0, 3.0])
def test_native_causal_attention_follows_a_running_max_that_grows_or_stays(growth: float) -> None:
    """Keys scaled up along the prompt (each block of keys passes the running max of the scores, so the sums so far
    are rescaled) or down (the first keys keep the max): causal attention, as a float64 reference computes it."""
    query, key, value = _qkv(200, 200, 4, 2, 64, seed=1)
    key = key * torch.linspace(1.0, 1.0 + growth, 200).clamp(min=0.1).view(1, 1, 200, 1)
    out = native.causal_attention(query, key, value, 64**-0.5)
    assert out is not None
    causal = torch.ones(200, 200, dtype=torch.bool).tril()
    torch.testing.assert_close(out, _reference(query, key, value, causal), rtol=1e-4, atol=1e-5)


@needs_native_attention
def test_native_causal_attention_gives_nan_to_the_queries_that_see_a_nan_key() -> None:
    """A NaN in one key (an overflowed activation) makes the outputs of every query that sees it NaN, as torch's
    attention does, and leaves the queries before it alone."""
    query, key, value = _qkv(100, 100, 2, 1, 64, seed=2)
    key[:, :, 70, 5] = math.nan
    out = native.causal_attention(query, key, value, 0.125)
    assert out is not None
    assert out[:, :, 70:].isnan().any(-1).all()
    assert not out[:, :, :70].isnan().any()
    causal = torch.ones(100, 100, dtype=torch.bool).tril()
    torch.testing.assert_close(out[:, :, :70], _reference(query, key, value, causal)[:, :, :70], rtol=1e-4, atol=1e-5)


@needs_native_attention
def test_native_causal_attention_declines_shapes_it_does_not_take_and_names_bad_ones() -> None:
    query, key, value = _qkv(40, 40, dim=8)  # head size not a multiple of 16: torch's kernel
    assert native.causal_attention(query, key, value, 0.3) is None
    query, key, value = _qkv(40, 40, heads=3, kv_heads=2, dim=16)
    assert native.causal_attention(query, key, value, 0.3) is None  # heads not a multiple of the key/value heads
    query, key, value = _qkv(40, 41, dim=16)
    with pytest.raises(RuntimeError, match="causal_attention: k and v must be"):
        torch.ops.mfsdk.causal_attention(query, key, value, 0.3)


@needs_native_attention
def test_causal_prompts_without_gradients_take_the_native_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = native.causal_attention

    def counted(q: torch.Tensor, *args: Any) -> torch.Tensor | None:
        calls.append(q.shape[2])
        return real(q, *args)

    monkeypatch.setattr(native, "causal_attention", counted)
    n = attention.NATIVE_CAUSAL_FROM
    query, key, value = _qkv(n, n, dim=16)
    with torch.no_grad():
        out = sdpa_attention(query, key, value, None, is_causal=True)
        sdpa_attention(query[:, :, 1:], key[:, :, 1:], value[:, :, 1:], None, is_causal=True)  # shorter: torch's
        sdpa_attention(query[:, :, 1:], key, value, None, is_causal=True)  # a cache: torch's
        sdpa_attention(query, key, value, None, is_causal=True, dropout=0.1)
        sdpa_attention(query, key, value, None, is_causal=False)
    sdpa_attention(query, key, value, None, is_causal=True)  # gradients: torch's
    assert calls == [n]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    torch.testing.assert_close(out, _reference(query, key, value, causal), rtol=1e-4, atol=1e-5)

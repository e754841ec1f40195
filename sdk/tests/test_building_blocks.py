"""microformers-sdk layers, rotary embeddings, masks, attention and caches, checked against first principles."""

from __future__ import annotations

import math

import pytest
import torch

from microformers import registry
from microformers.errors import CheckpointError, ConfigError, GenerationError
from microformers_sdk.attention import eager_attention, get_attention_function, repeat_kv, sdpa_attention
from microformers_sdk.cache import DynamicCache, StaticCache
from microformers_sdk.layers import GatedMLP, RMSNorm, get_activation
from microformers_sdk.masks import build_attention_mask, position_ids_from_attention_mask
from microformers_sdk.rotary import (
    RotaryEmbedding,
    apply_rotary_pos_emb,
    compute_inv_freq,
    normalize_rope_settings,
)
from microformers_sdk.weights import KeyRenamer, check_checkpoint_keys, layer_indices


def settings(**scaling: object) -> object:
    return normalize_rope_settings(
        head_dim=16, max_position_embeddings=32, rope_theta=10000.0, rope_scaling=scaling or None
    )


# -- layers ------------------------------------------------------------------------------------------
def test_rms_norm_and_gated_mlp_formulas() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    norm = RMSNorm(8, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 8))
        expected = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * norm.weight
        assert torch.allclose(norm(x), expected, atol=1e-6)
        mlp = GatedMLP(8, 12, "silu")
        gate, up = x @ mlp.gate_proj.weight.T, x @ mlp.up_proj.weight.T
        assert torch.allclose(mlp(x), (gate * torch.sigmoid(gate) * up) @ mlp.down_proj.weight.T, atol=1e-6)
    with pytest.raises(ConfigError, match="hidden_act='swoosh'"):
        get_activation("swoosh")


# -- rotary ------------------------------------------------------------------------------------------
def test_rope_frequencies_per_scaling_type() -> None:
    default, scale = compute_inv_freq(settings())
    expected = torch.tensor([10000.0 ** (-i / 16) for i in range(0, 16, 2)])
    assert scale == 1.0 and torch.allclose(default, expected, rtol=1e-6)
    linear, _ = compute_inv_freq(settings(rope_type="linear", factor=4.0))
    assert torch.allclose(linear, default / 4)
    # Dynamic NTK: unchanged up to max_position_embeddings, a larger base (lower frequencies) beyond it.
    dynamic_short, _ = compute_inv_freq(settings(rope_type="dynamic", factor=2.0), seq_len=20)
    dynamic_long, _ = compute_inv_freq(settings(rope_type="dynamic", factor=2.0), seq_len=64)
    assert torch.allclose(dynamic_short, default)
    assert dynamic_long[0] == default[0] and (dynamic_long[1:] < default[1:]).all()
    # llama3: highest frequencies kept, lowest divided by the factor, the band between interpolated.
    llama3, _ = compute_inv_freq(
        settings(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16)
    )  # fmt: skip
    wavelength = 2 * math.pi / default
    # exact: llama3 keeps these frequencies as computed
    assert torch.equal(llama3[wavelength < 4], default[wavelength < 4])
    assert torch.allclose(llama3[wavelength > 16], default[wavelength > 16] / 8)
    middle = (wavelength >= 4) & (wavelength <= 16)
    assert middle.any() and ((llama3[middle] <= default[middle]) & (llama3[middle] >= default[middle] / 8)).all()
    # YaRN: same kept/divided pattern, and cos/sin scaled by 0.1 ln(factor) + 1.
    yarn, yarn_scale = compute_inv_freq(settings(rope_type="yarn", factor=4.0, original_max_position_embeddings=8))
    assert yarn_scale == pytest.approx(0.1 * math.log(4.0) + 1)
    assert yarn[0] == default[0] and torch.allclose(yarn[-1], default[-1] / 4)


def test_rope_settings_spellings_and_errors() -> None:
    old = normalize_rope_settings(
        head_dim=8, max_position_embeddings=16, rope_theta=5.0, rope_scaling={"type": "linear", "factor": 2}
    )
    new = normalize_rope_settings(
        head_dim=8, max_position_embeddings=16, rope_parameters={"rope_type": "linear", "rope_theta": 5.0, "factor": 2}
    )
    assert old == new and old.rope_type == "linear" and old.theta == 5.0  # fmt: skip
    assert normalize_rope_settings(head_dim=8, max_position_embeddings=16, rope_scaling={"rope_type": "yarn", "factor": 2}).original_max_position_embeddings == 16  # fmt: skip
    with pytest.raises(ConfigError, match="rope_type='longrope'"):
        normalize_rope_settings(head_dim=8, max_position_embeddings=16, rope_scaling={"rope_type": "longrope"})
    with pytest.raises(ConfigError, match="factor"):
        normalize_rope_settings(
            head_dim=8, max_position_embeddings=16, rope_scaling={"rope_type": "linear", "factor": -1}
        )
    with pytest.raises(ConfigError, match="head_dim=7"):
        normalize_rope_settings(head_dim=7, max_position_embeddings=16)


def test_rotary_embedding_encodes_relative_position() -> None:
    rotary = RotaryEmbedding(settings())
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(q_pos: int, k_pos: int) -> torch.Tensor:
        cos, sin = rotary(torch.tensor([[q_pos, k_pos]]))
        rq, _ = apply_rotary_pos_emb(q, q, cos[:, :1], sin[:, :1])
        rk, _ = apply_rotary_pos_emb(k, k, cos[:, 1:], sin[:, 1:])
        assert torch.allclose(rq.norm(), q.norm(), atol=1e-5)  # a rotation keeps lengths
        return (rq * rk).sum()

    assert torch.allclose(score(5, 2), score(13, 10), atol=1e-4)
    assert not torch.allclose(score(5, 2), score(5, 4), atol=1e-3)
    cos, _sin = rotary(torch.tensor([[0, 1]]), dtype=torch.bfloat16)
    assert (
        cos.dtype == torch.bfloat16
        and cos.shape == (1, 2, 16)
        # exact: cos(0) is exactly 1
        and torch.equal(cos[0, 0], torch.ones(16, dtype=torch.bfloat16))
    )


def test_partial_rotary_leaves_the_rest_untouched() -> None:
    rotary = RotaryEmbedding(normalize_rope_settings(head_dim=16, max_position_embeddings=8, partial_rotary_factor=0.5))
    q = torch.randn(1, 2, 3, 16)
    cos, sin = rotary(torch.arange(3)[None])
    rq, _ = apply_rotary_pos_emb(q, q, cos, sin)
    # exact: the dimensions past the rotary part are handed on as they are
    assert torch.equal(rq[..., 8:], q[..., 8:]) and not torch.allclose(rq[..., :8], q[..., :8])


# -- masks and positions ---------------------------------------------------------------------------------
def test_mask_fast_paths_and_shapes() -> None:
    ones = torch.ones(2, 6, dtype=torch.long)
    assert build_attention_mask(None, 6, 0) == (None, True)
    assert build_attention_mask(ones, 1, 5) == (None, False)
    mask, causal = build_attention_mask(ones, 2, 4)  # chunk after a cache: an explicit mask
    assert not causal and mask.shape == (1, 1, 2, 6)
    assert mask[0, 0].tolist() == [[True] * 5 + [False], [True] * 6]


def test_mask_padding_window_and_empty_rows() -> None:
    attention = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    mask, causal = build_attention_mask(attention, 5, 0, sliding_window=2)
    assert not causal and mask.shape == (2, 1, 5, 5)
    # Row 0: query 3 sees keys 2..3 (window 2, not the padding); padded queries 0 and 1 see everything.
    assert mask[0, 0, 3].tolist() == [False, False, True, True, False]
    assert mask[0, 0, 0].all() and mask[0, 0, 1].all()
    assert mask[1, 0, 4].tolist() == [False, False, False, True, True]
    with pytest.raises(GenerationError, match="attention_mask has 3 columns"):
        build_attention_mask(attention[:, :3], 1, 4)


def test_position_ids_from_left_padded_mask() -> None:
    attention = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_attention_mask(attention, 0, 5).tolist() == [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert position_ids_from_attention_mask(attention, 4, 1).tolist() == [[2], [4]]
    assert position_ids_from_attention_mask(None, 3, 2).tolist() == [[3, 4]]


# -- attention -------------------------------------------------------------------------------------------
def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(q)
    group = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(q.shape[2]):
                keys = [j for j in range(k.shape[2]) if allowed[b, i, j]]
                scores = torch.stack([q[b, h, i] @ k[b, h // group, j] / math.sqrt(q.shape[-1]) for j in keys])
                out[b, h, i] = (scores.softmax(0)[:, None] * v[b, h // group, keys]).sum(0)
    return out


@pytest.mark.parametrize("fn", [sdpa_attention, eager_attention])
def test_grouped_query_attention_against_naive_loop(fn: object) -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    attention = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    mask, _ = build_attention_mask(attention, 5, 0)
    got = fn(q, k, v, mask, scaling=8**-0.5)
    want = naive_attention(q, k, v, mask[:, 0])
    assert torch.allclose(got[0, :, 1:], want[0, :, 1:], atol=1e-5) and torch.allclose(got[1], want[1], atol=1e-5)
    causal = fn(q, k, v, None, scaling=8**-0.5, is_causal=True)
    assert torch.allclose(causal, naive_attention(q, k, v, torch.ones(2, 5, 5).tril().bool()), atol=1e-5)


def test_eager_returns_weights_and_repeat_kv() -> None:
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    _out, weights = eager_attention(q, k, v, None, is_causal=True, return_weights=True)
    assert weights.shape == (1, 2, 3, 3) and torch.allclose(weights.sum(-1), torch.ones(1, 2, 3))
    assert weights[0, 0, 0, 1] == 0
    # exact: repeat_kv copies
    assert torch.equal(repeat_kv(k, 2)[:, 1], k[:, 0])


def test_attention_implementations_come_from_the_registry() -> None:
    assert registry.get("attention", "sdpa").plugin == "sdk"
    assert registry.require("attention", "eager") is eager_attention

    class Config:
        _attn_implementation = "eager"

    assert get_attention_function(Config()) is eager_attention
    assert get_attention_function("sdpa") is sdpa_attention


# -- caches ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [DynamicCache, lambda: StaticCache(max_cache_len=200)])
def test_cache_update_crop_reorder(make: object) -> None:
    cache = make()
    chunks = [torch.randn(3, 2, n, 4) for n in (5, 1, 1, 100)]
    for chunk in chunks:
        keys, values = cache.update(chunk, chunk + 1, layer_idx=0)
        cache.update(chunk * 2, chunk, layer_idx=1)
    everything = torch.cat(chunks, dim=2)
    # exact: the cache copies the states it is given (the checks below)
    assert torch.equal(keys, everything) and torch.equal(values, everything + 1)
    assert cache.get_seq_length() == 107 and len(cache) == 2 and torch.equal(cache[1][0], everything * 2)
    cache.crop(6)
    assert cache.get_seq_length() == 6 and torch.equal(cache[0][0], everything[:, :, :6])
    cache.crop(-1)
    assert cache.get_seq_length() == 5
    cache.reorder_cache(torch.tensor([2, 0, 1]))
    assert torch.equal(cache[0][0], everything[[2, 0, 1], :, :5])
    cache.batch_select_indices(torch.tensor([1]))
    cache.batch_repeat_interleave(2)
    assert torch.equal(cache[0][0], everything[[0, 0], :, :5])
    cache.reset()
    assert cache.get_seq_length() == 0


def test_static_cache_is_preallocated_and_bounded() -> None:
    cache = StaticCache(max_cache_len=8)
    keys, _ = cache.update(torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4), 0)
    storage = cache._keys[0]
    assert storage.shape == (1, 1, 8, 4) and keys.data_ptr() == storage.data_ptr()
    cache.update(torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4), 0)
    assert cache._keys[0] is storage  # never reallocated
    with pytest.raises(GenerationError, match="max_cache_len"):
        cache.update(torch.randn(1, 1, 1, 4), torch.randn(1, 1, 1, 4), 0)
    with pytest.raises(GenerationError, match="max_cache_len"):
        StaticCache(max_cache_len=0)


def test_cache_keeps_autograd_working() -> None:
    cache = DynamicCache()
    first = torch.randn(1, 1, 2, 4, requires_grad=True)
    second = torch.randn(1, 1, 1, 4, requires_grad=True)
    cache.update(first, first, 0)
    keys, _ = cache.update(second, second, 0)
    keys.sum().backward()
    assert first.grad is not None and second.grad is not None


def test_legacy_round_trip_and_batch_mismatch() -> None:
    legacy = tuple((torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4)) for _ in range(2))
    cache = DynamicCache.from_legacy_cache(legacy)
    # exact: the cache copies the states it is given
    assert all(torch.equal(a, b) for pair, orig in zip(cache.to_legacy_cache(), legacy) for a, b in zip(pair, orig))
    with pytest.raises(GenerationError, match="batch"):
        cache.update(torch.randn(3, 1, 1, 4), torch.randn(3, 1, 1, 4), 0)


# -- weight names ----------------------------------------------------------------------------------------
def test_key_renamer_and_checks() -> None:
    renamer = KeyRenamer([(r"^transformer\.", "model."), (r"\.gamma$", ".weight")])
    assert renamer.rename("transformer.h.0.ln.gamma") == "model.h.0.ln.weight"
    mapping = renamer.extend_key_map({"a": "a"}, ["a", "model.ln.weight"], ["a", "transformer.ln.gamma"])
    assert mapping == {"a": "a", "model.ln.weight": "transformer.ln.gamma"}
    assert layer_indices(["model.layers.0.x", "model.layers.12.y", "lm_head"]) == {0, 12}
    check_checkpoint_keys(["a", "b"], ["a", "b", "c"], source="x.safetensors")
    with pytest.raises(CheckpointError, match=r"x\.safetensors is missing 1 tensor\(s\): b"):
        check_checkpoint_keys(["a", "b"], ["a"], source="x.safetensors")


def test_as_cache_accepts_caches_and_legacy_tuples_only() -> None:
    from microformers.errors import InputError
    from microformers_sdk.cache import DynamicCache, as_cache

    assert as_cache(None) is None
    cache = DynamicCache()
    assert as_cache(cache) is cache
    keys = torch.randn(1, 2, 3, 4)
    converted = as_cache(((keys, keys.clone()),))
    assert isinstance(converted, DynamicCache) and converted.get_seq_length() == 3
    with pytest.raises(InputError, match="past_key_values must be"):
        as_cache("not a cache")


def test_last_token_indices_finds_the_last_real_token_for_both_padding_sides() -> None:
    from microformers_sdk.masks import last_token_indices

    ids = torch.tensor([[0, 0, 5, 6], [5, 6, 7, 0], [5, 6, 7, 8]])
    assert last_token_indices(ids, 0, 3, 4, ids.device).tolist() == [3, 2, 3]
    assert last_token_indices(None, 0, 2, 4, ids.device).tolist() == [3, 3]
    assert last_token_indices(ids, None, 3, 4, ids.device).tolist() == [3, 3, 3]


def test_prepare_decoder_inputs_embeds_caches_and_positions() -> None:
    from types import SimpleNamespace

    from microformers.errors import InputError
    from microformers_sdk.cache import DynamicCache
    from microformers_sdk.inputs import prepare_decoder_inputs

    config = SimpleNamespace(use_cache=True, output_attentions=False, output_hidden_states=True, return_dict=True)
    model = SimpleNamespace(config=config)
    embed = torch.nn.Embedding(10, 4)
    flags = {"output_attentions": None, "output_hidden_states": None, "return_dict": None}
    ids = torch.tensor([[0, 3, 4]])
    mask = torch.tensor([[0, 1, 1]])
    common = {"inputs_embeds": None, "attention_mask": mask, "position_ids": None, "past_key_values": None}
    prepared = prepare_decoder_inputs(model, embed, input_ids=ids, use_cache=None, **common, **flags)
    assert isinstance(prepared.cache, DynamicCache) and prepared.past_length == 0
    assert prepared.position_ids.tolist() == [[1, 0, 1]]  # left padding: real tokens count from 0
    assert prepared.output_hidden_states and not prepared.output_attentions and prepared.use_cache
    # exact: the same embedding lookup (a copy of rows)
    assert torch.equal(prepared.inputs_embeds, embed(ids))
    no_cache = prepare_decoder_inputs(model, embed, input_ids=ids, use_cache=False, **common, **flags)
    assert no_cache.cache is None
    with pytest.raises(InputError, match="exactly one of input_ids or inputs_embeds"):
        prepare_decoder_inputs(model, embed, input_ids=None, use_cache=None, **common, **flags)


# From test_mutation_kills.py: Tests written for mutants of the SDK that survived the mutation run
# (docs/reliability.md).


def test_short_mask_error_names_cached_and_new_lengths() -> None:
    """Caught mutants: the cached/new lengths passed to the mask-length check (only the message used them)."""
    mask = torch.ones(2, 5, dtype=torch.long)
    expected = r"attention_mask has 5 columns but must cover the 5 cached and 1 new tokens \(6\)"
    with pytest.raises(GenerationError, match=expected):
        position_ids_from_attention_mask(mask, 5, 1)
    with pytest.raises(GenerationError, match=expected):
        build_attention_mask(mask, 1, 5)


def test_ready_made_4d_mask_is_returned_unchanged() -> None:
    """Caught mutant: ``attention_mask.dim() == 4`` -> ``== 5`` (a 4-D mask would be rebuilt or rejected)."""
    ready = torch.rand(2, 1, 3, 3) > 0.5
    mask, is_causal = build_attention_mask(ready, 3, 0)
    assert mask is ready and is_causal is False

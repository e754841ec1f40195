"""``microformers_sdk.cache``: growth policy, storage reuse, zero-filled storage, sliding windows, reordering and
what each cache reports."""

from __future__ import annotations

import pytest
import torch

from microformers.errors import GenerationError, InputError
from microformers_sdk.cache import Cache, DynamicCache, StaticCache, as_cache

# From test_cache_mutants.py: Behaviour of ``microformers_sdk.cache`` that the mutation pass found unasserted
# (docs/reliability.md). Each test pins a documented property of the caches: growth policy, storage reuse, zero-
# filled static storage, placeholder layers, cropping bounds, the exact refusal messages.


def _states(batch: int, length: int, heads: int = 2, dim: int = 4, offset: float = 0.0) -> torch.Tensor:
    return torch.arange(batch * heads * length * dim, dtype=torch.float32).reshape(batch, heads, length, dim) + offset


def test_dynamic_cache_grows_by_half_again_with_at_least_64_positions_of_headroom() -> None:
    cache = DynamicCache(config=object())  # the reference's config= is accepted
    cache.update(_states(1, 10), _states(1, 10), 0)
    storage, _ = cache.layer_storage(0)
    assert storage.shape == (1, 2, 10 + 64, 4)
    # still room: written in place, no reallocation
    cache.update(_states(1, 50), _states(1, 50), 0)
    assert cache.layer_storage(0)[0] is storage
    # 60 + 200 = 260 positions needed: 260 + 130 allocated, and the first 60 copied over
    keys, values = cache.update(_states(1, 200, offset=1.0), _states(1, 200, offset=2.0), 0)
    assert cache.layer_storage(0)[0].shape[2] == 260 + 130
    assert keys.shape[2] == 260 and values.shape[2] == 260
    # exact: the cache copies the states it is given
    assert torch.equal(keys[:, :, :10], _states(1, 10)) and torch.equal(keys[:, :, 10:60], _states(1, 50))
    # exact: the cache copies the states it is given
    assert torch.equal(values[:, :, 60:], _states(1, 200, offset=2.0))


def test_values_may_have_their_own_head_count_and_size() -> None:
    cache = DynamicCache()
    key, value = _states(2, 3, heads=2, dim=4), _states(2, 3, heads=3, dim=6)
    cache.update(key, value, 0)
    keys, values = cache.update(key + 1, value + 1, 0)
    assert keys.shape == (2, 2, 6, 4) and values.shape == (2, 3, 6, 6)
    # exact: the cache copies the states it is given
    assert torch.equal(values, torch.cat((value, value + 1), dim=2))


def test_static_cache_storage_starts_as_zeros_and_reports_its_size() -> None:
    cache = StaticCache(max_cache_len=8)
    assert cache.get_max_cache_shape() == 8 and DynamicCache().get_max_cache_shape() is None
    cache.update(_states(1, 3, offset=1.0), _states(1, 3, offset=1.0), 0)
    keys, values = cache.layer_storage(0)
    assert keys.shape == (1, 2, 8, 4)
    assert torch.count_nonzero(keys[:, :, 3:]) == 0 and torch.count_nonzero(values[:, :, 3:]) == 0


def test_static_cache_arguments() -> None:
    assert StaticCache(16).max_cache_len == 16  # an int as the first argument is the length
    config = object()
    cache = StaticCache(config, max_cache_len="12", batch_size=1, dtype=torch.float16, device="cpu")
    assert cache.config is config and cache.max_cache_len == 12
    for bad in (None, 0, -3):
        with pytest.raises(GenerationError, match=rf"^StaticCache needs a positive max_cache_len, got {bad!r}$"):
            StaticCache(max_cache_len=bad)
    full = StaticCache(max_cache_len=4)
    full.update(_states(1, 3), _states(1, 3), 0)
    with pytest.raises(GenerationError) as info:
        full.update(_states(1, 2), _states(1, 2), 0)
    assert str(info.value) == (
        "StaticCache holds 4 positions but layer 0 needs 5; "
        "create it with a larger max_cache_len (prompt length + max_new_tokens)"
    )
    # exactly full is fine, in steps or at once
    full.update(_states(1, 1), _states(1, 1), 0)
    assert full.get_seq_length() == 4
    at_once = StaticCache(max_cache_len=4)
    at_once.update(_states(1, 4), _states(1, 4), 0)
    assert at_once.get_seq_length() == 4


def test_static_cache_with_a_config_still_needs_a_length_and_one_position_is_enough() -> None:
    # a config object without max_cache_len is refused clearly (not taken as the length)
    with pytest.raises(GenerationError, match=r"^StaticCache needs a positive max_cache_len, got None$"):
        StaticCache(object())
    one = StaticCache(max_cache_len=1)
    one.update(_states(1, 1), _states(1, 1), 0)
    assert one.get_seq_length() == 1 and one.layer_storage(0)[0].shape == (1, 2, 1, 4)


def test_layers_written_out_of_order_get_empty_placeholders() -> None:
    cache = DynamicCache()
    cache.update(_states(2, 3), _states(2, 3), 2)
    assert len(cache) == 3
    assert [cache.get_seq_length(i) for i in range(4)] == [0, 0, 3, 0]
    assert cache.seen_tokens == 0  # layer 0's count
    # reordering skips placeholder layers and reorders the real one
    # exact: reordering and selecting copy rows (both checks below)
    cache.reorder_cache(torch.tensor([1, 0]))
    assert torch.equal(cache[2][0], _states(2, 3)[[1, 0]])
    cache.batch_repeat_interleave(2)
    assert cache[2][0].shape[0] == 4
    cache.batch_select_indices(torch.tensor([0, 3]))
    assert torch.equal(cache[2][0], _states(2, 3)[[1, 0]])

    # (indexing a placeholder layer itself fails: see the report of the mutation pass)


def test_iteration_and_legacy_form_cover_every_layer() -> None:
    cache = DynamicCache()
    for layer in range(3):
        cache.update(_states(1, 2, offset=layer), _states(1, 2, offset=-layer), layer)
    layers = list(cache)
    # exact: the cache copies the states it is given
    assert len(layers) == 3 and all(torch.equal(k, _states(1, 2, offset=i)) for i, (k, _) in enumerate(layers))
    legacy = cache.to_legacy_cache()
    # exact: the cache copies the states it is given
    assert isinstance(legacy, tuple) and torch.equal(legacy[2][1], _states(1, 2, offset=-2))


def test_indexing_past_the_last_layer_names_it() -> None:
    cache = DynamicCache.from_legacy_cache([(_states(1, 2), _states(1, 2))])
    with pytest.raises(IndexError) as info:
        cache[1]
    assert str(info.value) == "the cache holds 1 layers; there is no layer 1"
    assert len(DynamicCache.from_legacy_cache(None)) == 0


def test_advance_counts_positions_written_into_storage_in_every_layer() -> None:
    cache = StaticCache(max_cache_len=10)
    for layer in range(2):
        cache.update(_states(1, 3), _states(1, 3), layer)
    keys, _ = cache.layer_storage(1)
    keys[:, :, 3:5] = 7.0
    cache.advance(2)
    assert cache.get_seq_length(0) == 5 and cache.get_seq_length(1) == 5 and cache.seen_tokens == 5
    assert torch.all(cache[1][0][:, :, 3:5] == 7.0)
    cache.advance()
    assert cache.get_seq_length(1) == 6


def test_crop_bounds_and_reset_keeps_storage() -> None:
    cache = DynamicCache()
    cache.update(_states(1, 5), _states(1, 5), 0)
    cache.update(_states(1, 2), _states(1, 2), 1)
    cache.crop(4)  # longer than layer 1: unchanged there
    assert [cache.get_seq_length(i) for i in range(2)] == [4, 2]
    cache.crop(-3)  # more than layer 1 holds: it empties, never negative
    assert [cache.get_seq_length(i) for i in range(2)] == [1, 0]
    cache.crop(0)  # zero keeps nothing (it is not "drop none from the end")
    assert [cache.get_seq_length(i) for i in range(2)] == [0, 0]
    cache.update(_states(1, 5), _states(1, 5), 0)
    storage = cache.layer_storage(0)[0]
    cache.reset()
    assert [cache.get_seq_length(i) for i in range(2)] == [0, 0] and len(cache) == 2
    keys, _ = cache.update(_states(1, 2, offset=9.0), _states(1, 2), 0)
    # exact: the cache copies the states it is given
    assert cache.layer_storage(0)[0] is storage and torch.equal(keys, _states(1, 2, offset=9.0))


def test_states_that_need_gradients_are_concatenated_not_written_in_place() -> None:
    cache = DynamicCache()
    first = _states(1, 2).requires_grad_()
    keys, values = cache.update(first, first * 2, 0)
    assert keys is first and cache.get_seq_length() == 2
    second = _states(1, 3, offset=5.0).requires_grad_()
    keys, values = cache.update(second, second * 2, 0)
    # exact: concatenation copies; doubling is exact
    assert torch.equal(keys, torch.cat((first, second), dim=2))
    assert torch.equal(values, torch.cat((first, second), dim=2) * 2)
    assert cache.get_seq_length() == 5
    (keys.sum() + values.sum()).backward()
    # exact: gradients of sums: 1 + 2
    assert torch.equal(first.grad, torch.full_like(first, 3.0))
    # a value that needs gradients (keys do not) takes the same path
    other = DynamicCache()
    other.update(_states(1, 2), _states(1, 2), 0)
    _, values = other.update(_states(1, 1), _states(1, 1).requires_grad_(), 0)
    assert values.requires_grad and other.get_seq_length() == 3


def test_a_later_write_does_not_break_backward_when_only_values_need_gradients() -> None:
    cache = DynamicCache()
    cache.update(_states(1, 2), _states(1, 2), 0)
    value = _states(1, 1).requires_grad_()
    _, values = cache.update(_states(1, 1), value, 0)
    loss = (values * values).sum()  # saves ``values`` for backward
    cache.update(_states(1, 1), _states(1, 1), 0)  # the next step, without gradients
    loss.backward()
    # exact: d(v*v)/dv is v + v, exactly 2v
    assert torch.equal(value.grad, 2 * value.detach())


def test_batch_mismatch_message_and_legacy_lists() -> None:
    cache = as_cache([(_states(2, 1, heads=3), _states(2, 1, heads=3))])
    assert isinstance(cache, DynamicCache) and cache.get_seq_length() == 1
    with pytest.raises(GenerationError) as info:
        cache.update(_states(4, 1, heads=3), _states(4, 1, heads=3), 0)  # batch, heads and length all differ
    assert str(info.value) == (
        "the cache holds a batch of 2 but layer 0 got states for 4; "
        "use batch_repeat_interleave/batch_select_indices to change the batch"
    )
    with pytest.raises(InputError) as info:
        as_cache({"not": "a cache"})
    assert str(info.value) == (
        "past_key_values must be a microformers_sdk Cache (e.g. DynamicCache) or a tuple of (keys, values) per "
        "layer, got dict"
    )


def test_the_base_class_has_no_storage_policy() -> None:
    with pytest.raises(NotImplementedError):
        Cache().update(_states(1, 1), _states(1, 1), 0)


def test_a_layer_not_written_yet_reads_as_empty() -> None:
    """Indexing a layer below the highest one written gives empty states, not a raw IndexError."""
    from microformers_sdk.cache import DynamicCache

    cache = DynamicCache()
    key = torch.randn(1, 2, 3, 4)
    cache.update(key, key + 1, layer_idx=2)
    keys, values = cache[0]
    assert keys.numel() == 0 and values.numel() == 0
    assert [k.shape[2] if k.dim() == 4 else 0 for k, _ in cache.to_legacy_cache()] == [0, 0, 3]
    # exact: the cache copies the states it is given
    assert torch.equal(cache[2][1], key + 1)

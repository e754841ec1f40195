"""Key/value caches for incremental decoding.

The interface every model and decoding strategy relies on (:class:`Cache`):
``update(key, value, layer_idx) -> (keys, values)`` appends the new ``(batch, kv_heads, new, head_dim)``
states of one layer and returns everything cached for it; ``get_seq_length(layer_idx=0)``;
``reorder_cache(beam_idx)``; ``crop(length)``; ``batch_repeat_interleave(n)``;
``batch_select_indices(indices)``; ``reset()``; ``len(cache)`` layers, ``cache[i] -> (keys, values)``.

Both caches here write new states into preallocated storage with slice copies and hand back views,
so a decoding step costs no reallocation of the whole history:

* :class:`DynamicCache` grows its storage geometrically when it fills up (amortised O(1) per token);
* :class:`StaticCache` allocates ``max_cache_len`` positions once and raises if they run out.

The views returned by ``update`` stay valid until the cache is cropped, reordered or grown.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from microformers.errors import GenerationError, InputError

from .masks import exporting_graph


class Cache:
    """Base class: per-layer key/value storage plus the number of positions filled."""

    # Whether storage starts as zeros: code that attends over the whole storage (masking positions
    # not written yet) must not meet NaN there, since a masked weight of 0 times NaN is still NaN.
    _zero_filled = False

    def __init__(self) -> None:
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._lengths: list[int] = []

    # -- storage policy (subclasses) -------------------------------------------------------------
    def _capacity_for(self, layer_idx: int, needed: int) -> int:
        raise NotImplementedError

    # -- the interface ----------------------------------------------------------------------------
    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``key``/``value`` ``(batch, kv_heads, new, head_dim)`` to layer ``layer_idx``; return all of it."""
        while len(self._keys) <= layer_idx:
            self._keys.append(key.new_empty(0))
            self._values.append(value.new_empty(0))
            self._lengths.append(0)
        start = self._lengths[layer_idx]
        end = start + key.shape[2]
        if key.requires_grad or value.requires_grad or exporting_graph():
            # Writing in place into storage autograd has saved would break backward: concatenate instead. A traced or
            # exported graph concatenates too: preallocated storage would fix the example's capacity in the graph.
            self._keys[layer_idx] = torch.cat((self._keys[layer_idx][:, :, :start], key), dim=2) if start else key
            self._values[layer_idx] = (
                torch.cat((self._values[layer_idx][:, :, :start], value), dim=2) if start else value
            )
            self._lengths[layer_idx] = end
            return self._keys[layer_idx], self._values[layer_idx]
        stored_keys = self._keys[layer_idx]
        if start and stored_keys.shape[0] != key.shape[0]:
            raise GenerationError(
                f"the cache holds a batch of {stored_keys.shape[0]} but layer {layer_idx} got states for "
                f"{key.shape[0]}; use batch_repeat_interleave/batch_select_indices to change the batch"
            )
        if stored_keys.dim() != 4 or stored_keys.shape[2] < end:
            self._reallocate(layer_idx, key, value, self._capacity_for(layer_idx, end))
        self._keys[layer_idx][:, :, start:end].copy_(key)
        self._values[layer_idx][:, :, start:end].copy_(value)
        self._lengths[layer_idx] = end
        return self._keys[layer_idx][:, :, :end], self._values[layer_idx][:, :, :end]

    def _reallocate(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, capacity: int) -> None:
        start = self._lengths[layer_idx]
        batch, kv_heads, _, head_dim = key.shape
        allocate = key.new_zeros if self._zero_filled else key.new_empty
        new_keys = allocate(batch, kv_heads, capacity, head_dim)
        new_values = allocate(batch, value.shape[1], capacity, value.shape[3])
        if start:
            new_keys[:, :, :start].copy_(self._keys[layer_idx][:, :, :start])
            new_values[:, :, :start].copy_(self._values[layer_idx][:, :, :start])
        self._keys[layer_idx], self._values[layer_idx] = new_keys, new_values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """How many positions layer ``layer_idx`` holds (0 before the first update)."""
        return self._lengths[layer_idx] if layer_idx < len(self._lengths) else 0

    def get_max_cache_shape(self) -> int | None:
        """The most positions the cache can hold, or ``None`` when it grows as needed."""
        return None

    def layer_storage(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole preallocated ``(batch, kv_heads, capacity, head_dim)`` key and value storage of a layer.

        Positions past ``get_seq_length(layer_idx)`` hold stale data. Code that writes new states
        straight into this storage (a compiled decoding step) reports them with :meth:`advance`.
        """
        return self._keys[layer_idx], self._values[layer_idx]

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more positions as filled in every layer (after writing them into the storage)."""
        self._lengths = [length + count for length in self._lengths]

    @property
    def seen_tokens(self) -> int:
        return self.get_seq_length()

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_idx >= len(self._keys):
            raise IndexError(f"the cache holds {len(self._keys)} layers; there is no layer {layer_idx}")
        keys, values = self._keys[layer_idx], self._values[layer_idx]
        if keys.dim() != 4:  # a layer below one that was written, not written itself: nothing cached yet
            return keys, values
        end = self._lengths[layer_idx]
        return keys[:, :, :end], values[:, :, :end]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for layer_idx in range(len(self)):
            yield self[layer_idx]

    def to_legacy_cache(self) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        """The cached states as ``((keys, values), ...)`` per layer."""
        return tuple(self)

    def _map_batch(self, fn: Any) -> None:
        for layer_idx in range(len(self._keys)):
            if self._keys[layer_idx].dim() == 4:
                self._keys[layer_idx] = fn(self._keys[layer_idx])
                self._values[layer_idx] = fn(self._values[layer_idx])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Reorder the batch dimension (beam search): row ``i`` becomes old row ``beam_idx[i]``."""
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every batch row ``repeats`` times in place (expanding a prompt to beams)."""
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows ``indices``."""
        self._map_batch(lambda t: t[indices])

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` positions (negative: drop that many from the end)."""
        for layer_idx, length in enumerate(self._lengths):
            keep = length + max_length if max_length < 0 else max_length
            self._lengths[layer_idx] = max(0, min(length, keep))

    def reset(self) -> None:
        """Forget all positions (storage is kept for reuse)."""
        self._lengths = [0] * len(self._lengths)


class DynamicCache(Cache):
    """A cache that grows as tokens arrive (the default when a model is called with ``use_cache=True``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Accepts and ignores the reference's optional ``config=`` argument for call compatibility.
        super().__init__()

    def _capacity_for(self, layer_idx: int, needed: int) -> int:
        # Headroom of half the length again (at least 64 positions) keeps growth amortised O(1).
        return needed + max(64, needed // 2)

    @classmethod
    def from_legacy_cache(
        cls, past_key_values: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None
    ) -> DynamicCache:
        """Build a cache from ``((keys, values), ...)`` per layer."""
        cache = cls()
        for layer_idx, (keys, values) in enumerate(past_key_values or ()):
            cache.update(keys, values, layer_idx)
        return cache


class StaticCache(Cache):
    """A cache preallocated for ``max_cache_len`` positions on first use; it never reallocates.

    ``batch_size``, ``dtype`` and ``device`` are taken from the first states written unless given
    (they are accepted for call compatibility; the storage always matches the states). The storage
    starts as zeros, so a decoding step may attend over all of it with unwritten positions masked.
    """

    _zero_filled = True

    def __init__(
        self,
        config: Any = None,
        max_cache_len: int | None = None,
        batch_size: int | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if isinstance(config, int) and max_cache_len is None:
            config, max_cache_len = None, config
        if max_cache_len is None or int(max_cache_len) <= 0:
            raise GenerationError(f"StaticCache needs a positive max_cache_len, got {max_cache_len!r}")
        self.max_cache_len = int(max_cache_len)
        self.config = config

    def _capacity_for(self, layer_idx: int, needed: int) -> int:
        if needed > self.max_cache_len:
            raise GenerationError(
                f"StaticCache holds {self.max_cache_len} positions but layer {layer_idx} needs {needed}; "
                "create it with a larger max_cache_len (prompt length + max_new_tokens)"
            )
        return self.max_cache_len

    def get_max_cache_shape(self) -> int | None:
        return self.max_cache_len

    def _reallocate(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, capacity: int) -> None:
        super()._reallocate(layer_idx, key, value, capacity)
        if key.is_cuda:
            # A compiled step with CUDA graphs (mode="reduce-overhead") writes into this storage; graphs are
            # kept only for inputs at static addresses. guard=False: another cache's storage re-records the
            # graph instead of recompiling the step.
            for storage in (self._keys[layer_idx], self._values[layer_idx]):
                torch._dynamo.mark_static_address(storage, guard=False)


def as_cache(past_key_values: Any) -> Cache | None:
    """``None`` or a :class:`Cache` as given; legacy per-layer ``(keys, values)`` tuples become a DynamicCache."""
    if past_key_values is None or isinstance(past_key_values, Cache):
        return past_key_values
    if isinstance(past_key_values, (list, tuple)):
        return DynamicCache.from_legacy_cache(past_key_values)
    raise InputError(
        "past_key_values must be a microformers_sdk Cache (e.g. DynamicCache) or a tuple of (keys, values) per "
        f"layer, got {type(past_key_values).__name__}"
    )


def _register_dynamic_cache_pytree() -> None:
    """A :class:`DynamicCache` is a pytree node: its children are each layer's keys and values (the positions filled),
    so ``torch.export`` can take one as an input and return one (a graph's inputs and outputs are trees of tensors).
    Unflattening builds a new cache holding those tensors."""
    from torch.utils import _pytree

    def flatten(cache: DynamicCache) -> tuple[list[torch.Tensor], int]:
        return [tensor for layer in cache.to_legacy_cache() for tensor in layer], len(cache)

    def flatten_with_keys(cache: DynamicCache) -> tuple[list[tuple[Any, torch.Tensor]], int]:
        children, layers = flatten(cache)
        return [(_pytree.SequenceKey(index), child) for index, child in enumerate(children)], layers

    def unflatten(children: Any, layers: int) -> DynamicCache:
        children = list(children)
        return DynamicCache.from_legacy_cache([(children[2 * i], children[2 * i + 1]) for i in range(layers)])

    _pytree.register_pytree_node(
        DynamicCache, flatten, unflatten, serialized_type_name=f"{__name__}.DynamicCache",
        flatten_with_keys_fn=flatten_with_keys,
    )  # fmt: skip


_register_dynamic_cache_pytree()

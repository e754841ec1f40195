"""The continuous-batching engine: one decode loop on a background thread.

Between two decoding steps the loop admits waiting requests and retires finished or abandoned ones,
so a long request never holds up a short one. New prompts are prefilled together: one forward takes
several requests' prompt tokens packed end to end (each with its own positions from 0, attending
causally over its own tokens only), up to ``prefill_chunk`` tokens, and takes no further prompt once it
holds ``prefill_group`` tokens, so sixteen clients arriving at once cost a few forwards instead of
sixteen, and the first of them get their first tokens after the first forward instead of after all.
The loop goes on prefilling (up to ``prefill_chunk`` tokens) before the next decoding step. A prompt
longer than what is left of the chunk is prefilled in chunks, one per loop turn, with a decoding step
of the running rows in between, so running streams keep flowing while a long prompt is read. A model that does not route its attention
through the serving attention function, or does not honour ``position_ids`` (checked once with a
small probe when the engine starts), is prefilled one prompt at a time as ``model.generate`` does.

Every running sequence keeps its own key/value buffers in a :class:`RaggedCache`: memory for the
rows that exist, grown as each row lengthens and freed when it finishes. The batched forward runs
the projections and MLPs for all rows at once; attention is computed row by row over that row's own
keys only (the ``serve_ragged`` attention implementation), with the same shapes a lone ``generate``
call has, so no padding enters any sum. What remains batch-dependent is the matrix multiplication
itself (BLAS blocks a 16-row product differently from a 1-row one, ~1e-6 in the logits), which is
why greedy outputs equal single-request ``generate`` outputs token for token except at exact
near-ties of the two best logits; the tests check the identity on concurrent, staggered requests.

A decoder with a native decode step (on the CPU: float32 layers through the SDK's float step, quantized ones
through ``microformers-quant``'s; what ``generate`` uses by default) is decoded through that step instead, all
running rows in one call. The step writes one cache
position shared by all its rows, so the rows' caches are laid side by side in a slab (:class:`_Slab`), each
right-aligned to end at the shared column and masked to its own positions, as in a left-padded batch; the
slab is rebuilt from the previous one (and a new row's own buffers) when rows join or leave, or when it is
full. ``decode_path`` says which step runs; ``microformers serve`` prints it at startup.

One request never takes the others down: a row whose scores are not finite, or whose sampling or
decoding fails, is retired alone with an ``"error"`` event; a batched forward that raises is re-run
row by row, so only the rows that fail on their own are retired. Admission is bounded by a budget of
cache tokens (prompt plus ``max_new_tokens`` of every request admitted and not yet finished).
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import torch.nn.functional as F

from microformers.devices import available_memory
from microformers_sdk.cache import Cache, DynamicCache, StaticCache
from microformers_sdk.decode_steps import NativeDecodeStep, StaticStepRunner, decoding_with

RAGGED_ATTENTION = "serve_ragged"
# A row's buffers grow by a quarter of what they hold, at least this many positions at a time.
ROW_GROWTH = 128
# Prompt tokens one packed prefill forward takes (several prompts, or a chunk of a long one).
DEFAULT_PREFILL_CHUNK = 512
# A packed prefill forward takes no further prompt once it holds this many tokens: prompts arriving together
# are read in a few forwards, and the first of them get their first tokens after the first forward. A forward
# costs a fixed part (streaming the weights) plus a part per token; past about this size the fixed part is
# spread thin (SmolLM2-135M, one thread: 4 x 20 tokens 3.3 ms a token, 16 x 20 tokens 2.7 ms).
DEFAULT_PREFILL_GROUP = 64
# The default KV budget takes this share of the memory free once the model is loaded.
DEFAULT_MEMORY_SHARE = 0.5

logger = logging.getLogger("microformers")

# What the decode step tells the ragged attention function (engine thread only).
_STEP = threading.local()


class QueueFullError(Exception):
    """The waiting queue holds ``max_queue`` requests already."""


class ShuttingDownError(Exception):
    """The engine no longer admits requests."""


class CacheBudgetError(Exception):
    """The request's cache tokens do not fit the KV budget: now (``retry``), or ever."""

    def __init__(self, message: str, *, needed: int, budget: int, retry: bool) -> None:
        super().__init__(message)
        self.needed, self.budget, self.retry = needed, budget, retry


@attrs.define(eq=False)
class Event:
    """What the engine reports for a request: ``kind`` is ``"delta"``, ``"done"`` or ``"error"``."""

    kind: str
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@attrs.define(eq=False)
class GenerationRequest:
    """One request: prompt ids, decoding settings, and ``emit(event)`` called from the engine thread."""

    prompt_ids: list[int]
    max_new_tokens: int
    emit: Callable[[Event], None]
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: Sequence[str] = ()
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    cancelled: bool = False
    # state kept by the engine
    output_ids: list[int] = attrs.field(factory=list)
    text: str = ""
    sent: int = 0
    length: int = 0  # positions in the cache
    generator: torch.Generator | None = None
    counts: dict[int, int] = attrs.field(factory=dict)
    submitted: float = attrs.field(factory=time.monotonic)
    reserved: int = 0  # cache tokens counted against the engine's budget
    stop_tables: list[list[int]] | None = None
    buffers: _RowBuffers | None = None  # the row's cache while its prompt is being prefilled

    def cancel(self) -> None:
        """Free this request's slot at the next step (a client went away)."""
        self.cancelled = True


class _RowBuffers:
    """One sequence's keys and values: per layer ``(1, kv_heads, capacity, head_dim)``, ``length`` filled."""

    __slots__ = ("keys", "length", "limit", "planned", "values")

    def __init__(self, length: int, limit: int, planned: int = 0) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.length = length
        self.limit = limit  # the most positions this row will ever hold
        self.planned = planned  # positions its prompt will fill (the first buffers hold them all)

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def ensure(self, positions: int) -> None:
        have = self.capacity
        if positions <= have:
            return
        grown = max(positions, min(have + max(ROW_GROWTH, have // 4), self.limit))
        for layer_idx in range(len(self.keys)):  # one layer at a time: the transient copy is one layer's
            for store in (self.keys, self.values):
                old = store[layer_idx]
                new = old.new_empty(old.shape[0], old.shape[1], grown, old.shape[3])
                new[:, :, : self.length].copy_(old[:, :, : self.length])
                store[layer_idx] = new

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class RaggedCache(Cache):
    """Key/value storage for sequences of different lengths: one set of buffers per row, no padding.

    Rows are added from a prefilled cache (:meth:`add_row`) and dropped with their buffers
    (:meth:`remove_row`). A decoding step selects the rows it runs (:meth:`begin_step`); ``update``
    writes each row's new states at that row's own length. It then hands the new states back as
    they are, and :func:`ragged_attention` recognises them and attends over each row's buffers
    (:meth:`row_states`). A model that attends by itself instead (it never hands those states to
    the attention function) is noticed by the engine, which switches the cache to ``stacked``:
    ``update`` then returns the rows copied into one zero-padded batch, which the step's mask covers.
    """

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[_RowBuffers] = []
        self._active: list[_RowBuffers] = []
        self._positions: tuple[torch.Tensor, ...] = ()  # each active row's new position (a one-element tensor)
        self._fresh: tuple[torch.Tensor, torch.Tensor, int] | None = None
        self._prefilling: _RowBuffers | None = None
        self._packed: list[tuple[_RowBuffers, int, int]] | None = None  # (row, start, count) per segment
        self._donors: list[tuple[_RowBuffers, int] | None] = []
        self.stacked = False
        self.updates = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._rows[0].keys) if self._rows else 0

    @property
    def rows(self) -> int:
        return len(self._rows)

    @property
    def row_lengths(self) -> list[int]:
        return [row.length for row in self._rows]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        if self._prefilling is not None or self._packed is not None:
            return 0  # a packed prefill is a fresh prompt to the model: positions come from position_ids
        return max((row.length for row in self._active or self._rows), default=0)

    def nbytes(self) -> int:
        """Bytes held by every row's buffers."""
        return sum(row.nbytes() for row in self._rows)

    def row_capacity(self, row: int) -> int:
        return self._rows[row].capacity

    def add_row(self, prefilled: Cache, limit: int) -> int:
        """Copy a one-row prefilled cache in as a new row that will hold at most ``limit`` positions."""
        layers = [prefilled[i] for i in range(len(prefilled))]
        length = layers[0][0].shape[2]
        row = _RowBuffers(length, max(limit, length + 1))
        capacity = min(length + ROW_GROWTH, row.limit)
        for keys, values in layers:
            for source, store in ((keys, row.keys), (values, row.values)):
                buffer = source.new_empty(1, source.shape[1], capacity, source.shape[3])
                buffer[:, :, :length].copy_(source[:1])
                store.append(buffer)
        self._rows.append(row)
        return len(self._rows) - 1

    def begin_prefill(self, limit: int) -> None:
        """The next forward prefills one new sequence: each layer's states go straight into buffers of that
        row's own (no second copy of the prompt's cache), sized for at most ``limit`` positions."""
        self._prefilling = _RowBuffers(0, limit)

    def end_prefill(self, keep: bool) -> int | None:
        """Add the prefilled row (``keep``; returns its index) or drop it (the forward failed)."""
        row, self._prefilling = self._prefilling, None
        if not keep or row is None or not row.keys:
            return None
        self._rows.append(row)
        return len(self._rows) - 1

    def _prefill(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self._prefilling
        assert row is not None
        if key.shape[0] != 1 or layer_idx != len(row.keys):
            raise RuntimeError("a serving prefill writes each layer once, for one sequence")
        length = key.shape[2]
        row.length, row.limit = length, max(row.limit, length + 1)
        capacity = min(length + ROW_GROWTH, row.limit)
        for source, store in ((key, row.keys), (value, row.values)):
            buffer = source.new_empty(1, source.shape[1], capacity, source.shape[3])
            buffer[:, :, :length].copy_(source)
            store.append(buffer)
        return key, value

    def begin_packed(
        self,
        segments: Sequence[tuple[_RowBuffers, int]],
        donors: Sequence[tuple[_RowBuffers, int] | None] | None = None,
    ) -> None:
        """The next forward prefills ``count`` new positions of each ``(row, count)``, packed end to end in one
        sequence; each row continues at its own ``length`` (0 for a new prompt, more for a later chunk).

        A segment's donor ``(source, shared)`` supplies its first ``shared`` positions (the row's ``length``): a
        prompt that begins with the same tokens as ``source``'s copies those keys and values, layer by layer,
        instead of computing them. ``source`` is a row already holding them, or an earlier segment of this
        forward that writes them first."""
        for row, _count in segments:
            if row.keys:
                row.ensure(row.length + _count)
        self._packed = [(row, row.length, count) for row, count in segments]
        self._donors = list(donors) if donors is not None else [None] * len(segments)
        self._fresh = None
        self.updates = self.hits = 0

    def end_packed(self, keep: bool) -> None:
        """After the packed forward: advance every segment's row (``keep``) or leave the lengths (it failed)."""
        packed, self._packed = self._packed, None
        self._fresh = None
        self._donors = []
        if keep and packed is not None:
            for row, start, count in packed:
                row.length = start + count

    def add_prefilled_row(self, row: _RowBuffers) -> int:
        """Join a row whose prompt is now wholly in its buffers to the decoding rows; returns its index."""
        self._rows.append(row)
        return len(self._rows) - 1

    def _pack(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        packed = self._packed
        assert packed is not None
        if key.shape[0] != 1 or key.shape[2] != sum(count for _row, _start, count in packed):
            raise RuntimeError("a packed serving prefill takes one sequence holding every segment's tokens")
        offset = 0
        for row, start, count in packed:
            if len(row.keys) == layer_idx:  # a new prompt: this layer's buffers are made now
                capacity = min(max(row.limit, start + count), max(row.planned, start + count) + ROW_GROWTH)
                for store, source in ((row.keys, key), (row.values, value)):
                    store.append(source.new_empty(1, source.shape[1], max(capacity, row.capacity), source.shape[3]))
            elif len(row.keys) < layer_idx:
                raise RuntimeError("a serving prefill writes each layer once, in order")
            row.keys[layer_idx][0, :, start : start + count] = key[0, :, offset : offset + count]
            row.values[layer_idx][0, :, start : start + count] = value[0, :, offset : offset + count]
            offset += count
        # after every segment's own writes: a donor in this forward has written its positions of this layer
        for (row, _start, _count), donor in zip(packed, self._donors, strict=True):
            if donor is not None:
                source, shared = donor
                row.keys[layer_idx][:, :, :shared] = source.keys[layer_idx][:, :, :shared]
                row.values[layer_idx][:, :, :shared] = source.values[layer_idx][:, :, :shared]
        self.updates += 1
        self._fresh = (key, value, layer_idx)
        return key, value

    def packed_states(
        self, key: torch.Tensor, value: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor, int, int]] | None:
        """Per segment of a packed prefill: ``(keys, values, start, count)`` with the row's keys and values up
        to the segment's end, when ``key``/``value`` are what ``update`` just returned; else ``None``."""
        fresh = self._fresh
        if self._packed is None or fresh is None or key is not fresh[0] or value is not fresh[1]:
            return None
        self.hits += 1
        layer_idx = fresh[2]
        return [
            (row.keys[layer_idx][:, :, : start + count], row.values[layer_idx][:, :, : start + count], start, count)
            for row, start, count in self._packed
        ]

    def remove_row(self, row: int) -> None:
        """Drop ``row`` and its buffers; the rows after it move up one index."""
        del self._rows[row]

    def row_storage(self, row: int, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The filled keys and values ``(1, kv_heads, length, head_dim)`` of one row and layer."""
        buffers = self._rows[row]
        return buffers.keys[layer_idx][:, :, : buffers.length], buffers.values[layer_idx][:, :, : buffers.length]

    def begin_step(self, rows: Sequence[int]) -> None:
        """The next forward decodes one token for each of ``rows`` (indices), in that order."""
        self._active = [self._rows[i] for i in rows]
        for row in self._active:
            row.ensure(row.length + 1)
        if self._active:
            device = self._active[0].keys[0].device
            self._positions = torch.tensor([row.length for row in self._active], device=device).split(1)
        self._fresh = None
        self.updates = self.hits = 0

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self._prefilling is not None:
            return self._prefill(key, value, layer_idx)
        if self._packed is not None:
            return self._pack(key, value, layer_idx)
        rows = self._active
        if key.shape[2] != 1 or key.shape[0] != len(rows):
            raise RuntimeError("RaggedCache takes one new token per running row per step")
        # one copy per row and tensor, at the row's own position (index_copy_: the cheapest call for a few numbers)
        for row, position, new_key, new_value in zip(rows, self._positions, key.split(1), value.split(1), strict=True):
            row.keys[layer_idx].index_copy_(2, position, new_key)
            row.values[layer_idx].index_copy_(2, position, new_value)
        self.updates += 1
        if self.stacked:
            return self._stack(rows, layer_idx, key, value)
        self._fresh = (key, value, layer_idx)
        return key, value

    def row_states(self, key: torch.Tensor, value: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Each active row's keys and values including the new token, when ``key``/``value`` are what
        ``update`` just returned; else ``None``."""
        fresh = self._fresh
        if fresh is None or key is not fresh[0] or value is not fresh[1]:
            return None
        self.hits += 1
        layer_idx = fresh[2]
        end = [row.length + 1 for row in self._active]
        return [
            (row.keys[layer_idx][:, :, :n], row.values[layer_idx][:, :, :n])
            for row, n in zip(self._active, end, strict=True)
        ]

    @staticmethod
    def _stack(
        rows: list[_RowBuffers], layer_idx: int, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = max(row.length for row in rows) + 1
        keys = key.new_zeros(len(rows), key.shape[1], end, key.shape[3])
        values = value.new_zeros(len(rows), value.shape[1], end, value.shape[3])
        for index, row in enumerate(rows):
            keys[index, :, : row.length + 1] = row.keys[layer_idx][0, :, : row.length + 1]
            values[index, :, : row.length + 1] = row.values[layer_idx][0, :, : row.length + 1]
        return keys, values

    def advance_rows(self) -> None:
        for row in self._active:
            row.length += 1
        self._active = []
        self._positions = ()
        self._fresh = None


class _Slab:
    """The running rows' caches side by side for the native step, which writes one cache position shared by all
    its rows: per layer ``(rows, kv_heads, capacity, head_dim)``, each row's positions right-aligned to end at
    column ``cursor - 1`` (as in a left-padded batch), so column ``cursor`` takes every row's next position and a
    mask over the columns before a row's start keeps it to its own keys. Rebuilt when the rows change."""

    __slots__ = ("cursor", "keys", "rows", "values")

    def __init__(
        self, rows: list[_RowBuffers], keys: list[torch.Tensor], values: list[torch.Tensor], cursor: int
    ) -> None:
        self.rows, self.keys, self.values, self.cursor = rows, keys, values, cursor

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def view(self) -> StaticCache:
        """The slab as a prefilled :class:`StaticCache` the model's static step writes into in place."""
        cache = StaticCache(max_cache_len=self.capacity)
        cache._keys, cache._values = list(self.keys), list(self.values)
        cache._lengths = [self.cursor] * len(self.keys)
        return cache

    def columns(self, row: int, length: int) -> slice:
        return slice(self.cursor - length, self.cursor)


class NotNativeError(RuntimeError):
    """The model's static step could not run natively for this call (it would have run eagerly instead)."""


class _NativeOnly(StaticStepRunner):
    """The model's native decode step, refusing instead of falling back to the eager static step, so the engine
    knows which step ran (and says so in ``decode_path``) instead of silently decoding another way."""

    def __init__(self, step: NativeDecodeStep) -> None:
        super().__init__(step.model, step.layout)
        self.step = step
        self.includes_head = step.includes_head
        self.calls = 0

    def layers(self, inputs_embeds: torch.Tensor, layer_inputs: Any, cache: Cache) -> torch.Tensor:
        hidden = self.step.layers(inputs_embeds, layer_inputs, cache)
        if hidden is None:
            raise NotNativeError("the native decode step does not take this model's inputs (dtype, partial rotary)")
        self.calls += 1
        return hidden


def native_step_for(model: Any) -> _NativeOnly | None:
    """The native decode step ``generate`` would use by default for ``model`` (a float32 decoder on the CPU: the
    SDK's float step; a quantized one with microformers-quant's kernels built), wrapped so that it never falls
    back; None where the model has none (other dtypes or devices, packed weights, hooks)."""
    if getattr(model, "decode_step_layout", None) is None or getattr(model, "dtype", None) != torch.float32:
        return None
    from microformers_sdk.decode_steps import default_decode_step

    try:
        step = default_decode_step(model, float_layers=True)
    except Exception:  # a layout that cannot be described: the eager batched step serves it
        return None
    return None if step is None else _NativeOnly(step)


def ragged_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> torch.Tensor:
    """Attention for the engine's model: during a decode step, each row over its own keys only.

    Outside a decode step (a prefill, or a call from another thread) it is the model's usual
    implementation. Inside one, row ``i`` attends over its own keys with no mask, the very call a
    lone ``generate`` step makes, so no padded position enters its sums. Inside a packed prefill, each
    segment's queries attend causally over that row's own keys (a new prompt: the very call a lone
    prefill makes; a later chunk: over the row's earlier positions too).
    """
    base = getattr(_STEP, "base", None)
    lengths = getattr(_STEP, "lengths", None)
    cache = getattr(_STEP, "cache", None)
    if base is None:
        from microformers_sdk.attention import sdpa_attention

        base = sdpa_attention
    if getattr(_STEP, "packed", False) and cache is not None:
        segments = cache.packed_states(key, value)
        if segments is None:  # the model attends over states of its own: the engine notices and stops packing
            return base(query, key, value, attention_mask, **kwargs)
        outputs, offset = [], 0
        for keys, values, start, count in segments:
            part = query[:, :, offset : offset + count]
            offset += count
            if start == 0:
                outputs.append(base(part, keys, values, None, **{**kwargs, "is_causal": True}))
            else:  # query i sits at position start + i and sees keys up to there
                visible = torch.ones(count, start + count, dtype=torch.bool, device=query.device).tril(start)
                outputs.append(base(part, keys, values, visible, **{**kwargs, "is_causal": False}))
        return torch.cat(outputs, dim=2)
    if lengths is None or query.shape[2] != 1 or len(lengths) != query.shape[0]:
        return base(query, key, value, attention_mask, **kwargs)
    kwargs["is_causal"] = False
    states = cache.row_states(key, value) if cache is not None else None
    if states is None:  # stacked: the rows padded into one batch
        states = [(key[i : i + 1, :, :length], value[i : i + 1, :, :length]) for i, length in enumerate(lengths)]
    queries = query.split(1)
    if _plain_sdpa(base, query, key, kwargs):  # the very call sdpa_attention makes, without its per-call checks
        scale, gqa = kwargs.get("scaling"), query.shape[1] != key.shape[1]
        outputs = [
            F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
            for q, (k, v) in zip(queries, states, strict=True)
        ]
    else:
        outputs = [base(q, k, v, None, **kwargs) for q, (k, v) in zip(queries, states, strict=True)]
    return torch.cat(outputs, dim=0)


def _plain_sdpa(base: Any, query: torch.Tensor, key: torch.Tensor, kwargs: dict[str, Any]) -> bool:
    """Whether ``base(q, k, v, None, **kwargs)`` for one decoding row is ``F.scaled_dot_product_attention(q, k, v,
    scale=..., enable_gqa=...)``: the SDK's SDPA function without dropout or soft-capping, and either no grouped
    heads or a torch whose SDPA shares key/value heads itself (else it repeats them first)."""
    from microformers_sdk import attention

    return (
        base is attention.sdpa_attention
        and not kwargs.get("dropout")
        and kwargs.get("softcap") is None
        and key.shape[1] > 0
        and (query.shape[1] == key.shape[1] or attention.sdpa_shares_kv_heads())
    )


def _eos_ids(model: Any) -> set[int]:
    found: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None)
        if value is None:
            continue
        found.update(int(v) for v in (value if isinstance(value, (list, tuple)) else [value]))
    return found


def context_length(model: Any) -> int:
    """How many positions a request may fill: ``max_position_embeddings`` (else ``n_positions``), and no
    more than the smallest sliding attention window, which the per-row decode step does not apply, and no
    more than a length where the model's cached states go stale."""
    config = model.config
    limit = 2048
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            limit = value
            break
    per_layer = getattr(config, "layer_sliding_window", None)
    layers = getattr(config, "num_hidden_layers", None)
    if callable(per_layer) and isinstance(layers, int):
        windows = [per_layer(i) for i in range(layers)]
    else:
        windows = [getattr(config, "sliding_window", None)]
    windows = [w for w in windows if isinstance(w, int) and w > 0]
    limit = min([limit, *windows])
    # cached states that go stale at some length (Phi-3's LongRoPE) would need the row re-prefilled: stop there
    needs_recompute = getattr(model, "cache_needs_recompute", None)
    if needs_recompute is not None:
        for total in range(2, limit + 1):
            if needs_recompute(total - 1, total):
                return total - 1
    return limit


def kv_bytes_per_token(model: Any) -> int:
    """Cache bytes one position takes over all layers, measured with a one-token prefill."""
    prefilled = DynamicCache()
    with torch.inference_mode():
        _STEP.lengths = None
        model(
            input_ids=torch.zeros(1, 1, dtype=torch.long, device=model.device), past_key_values=prefilled,
            use_cache=True, logits_to_keep=1, return_dict=True,
        )  # fmt: skip
    total = 0
    for layer_idx in range(len(prefilled)):
        for states in prefilled[layer_idx][:2]:
            total += states[0, :, :1].numel() * states.element_size()
    return max(total, 1)


def free_memory(device: torch.device) -> int:
    """Bytes free for new allocations: the accelerator's free memory, else the system's available RAM."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    available = available_memory()
    return 2**62 if available is None else available


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"


def _prefix_table(pattern: str) -> list[int]:
    """KMP failure function: ``table[i]`` is the longest proper prefix of ``pattern[: i + 1]`` that ends it."""
    table = [0] * len(pattern)
    state = 0
    for i in range(1, len(pattern)):
        while state and pattern[i] != pattern[state]:
            state = table[state - 1]
        if pattern[i] == pattern[state]:
            state += 1
        table[i] = state
    return table


def _partial_stop(text: str, stop: str, table: list[int]) -> int:
    """How many characters at the end of ``text`` are a proper prefix of ``stop`` (linear in ``len(stop)``)."""
    state = 0
    for char in text[max(0, len(text) - len(stop) + 1) :]:
        while state and (state == len(stop) or stop[state] != char):
            state = table[state - 1]
        if stop[state] == char:
            state += 1
    return min(state, len(stop) - 1)


class Engine:
    """Continuous batching for one causal LM and its tokenizer.

    ``submit(request)`` queues a request (``QueueFullError`` past ``max_queue`` waiting,
    ``CacheBudgetError`` past ``max_kv_tokens`` cache tokens promised, ``ShuttingDownError`` after
    :meth:`drain`); the loop thread prefills it, decodes it together with every other running
    request, and calls ``request.emit`` with text deltas and a final ``"done"`` (or ``"error"``) event.

    ``max_kv_tokens`` defaults to what half the free memory holds (:func:`default_kv_tokens`).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 16,
        max_queue: int = 256,
        max_kv_tokens: int | None = None,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        native_rows: int | None = None,
        prefill_group: int = DEFAULT_PREFILL_GROUP,
    ) -> None:
        from microformers_sdk.attention import attention_implementation_name, get_attention_function

        if max_batch_size < 1 or max_queue < 0:
            raise ValueError(f"max_batch_size must be >= 1 and max_queue >= 0, got {max_batch_size}, {max_queue}")
        if max_kv_tokens is not None and max_kv_tokens < 2:
            raise ValueError(f"max_kv_tokens must be >= 2, got {max_kv_tokens}")
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1 prompt token per forward, got {prefill_chunk}")
        if prefill_group < 1:
            raise ValueError(f"prefill_group must be >= 1 prompt token per forward, got {prefill_group}")
        if native_rows is not None and native_rows < 0:
            raise ValueError(f"native_rows must be >= 0 (0: never the native step), got {native_rows}")
        self.prefill_chunk = prefill_chunk
        self.prefill_group = prefill_group
        self.model = model.eval()
        self.device = model.device
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self.context_length = context_length(model)
        self.eos_ids = _eos_ids(model)
        self.vocab_rows = model.get_input_embeddings().num_embeddings
        self.kv_bytes_per_token = kv_bytes_per_token(model)
        if max_kv_tokens is not None:
            self._check_kv_budget(max_kv_tokens)
        self.max_kv_tokens = max_kv_tokens if max_kv_tokens is not None else self.default_kv_tokens()
        config = model.config
        name = attention_implementation_name(config)
        if name != RAGGED_ATTENTION:
            self._base_attention = get_attention_function(name)
            config._attn_implementation = RAGGED_ATTENTION
        else:
            self._base_attention = get_attention_function("sdpa")
        self._native = native_step_for(model)
        self.native_rows = max_batch_size if native_rows is None else native_rows
        self.native_steps = 0  # decoding steps that ran through the native step
        self._waiting: collections.deque[GenerationRequest] = collections.deque()
        self._running: list[GenerationRequest] = []
        self._prefilling: list[GenerationRequest] = []  # admitted; their prompts are partly in the cache
        self._packing: bool | None = None  # whether prompts can be packed (probed on the loop thread)
        self.prefill_forwards = 0  # model forwards that prefilled prompts (packed or alone)
        self.prefill_tokens = 0  # prompt positions those forwards computed (shared prefixes are copied instead)
        self._stepping: list[GenerationRequest] = []  # the rows of the forward in progress
        self._cache = RaggedCache()
        self._slab: _Slab | None = None  # the running rows side by side while the native step decodes them
        self._condition = threading.Condition()
        self._reserved = 0
        self._draining = False
        self._stopped = False
        self._closed = False
        self.steps = 0
        _bound_heap_retention()
        self._thread = threading.Thread(target=self._loop, name="microformers-serve-engine", daemon=True)
        self._thread.start()
        atexit.register(_close_at_exit, weakref.ref(self))

    @property
    def decode_path(self) -> str:
        """One line saying how decoding steps run (``microformers serve`` prints it at startup)."""
        batched = "one batched eager forward over every running row, each attending over its own cache"
        if self._native is not None and self.native_rows == 0:
            return f"decoding: {batched} (the native decode step is off: native_rows=0)"
        if self._native is not None:
            rows = (
                "every step" if self.native_rows >= self.max_batch_size else f"steps of up to {self.native_rows} rows"
            )
            return (
                f"decoding: the native decode step (what generate() uses) for {rows}, all running rows in one "
                "call over a preallocated slab of their caches (each row right-aligned, masked to its own "
                f"positions; rebuilt when rows join or leave){'' if rows == 'every step' else f'; more: {batched}'}"
            )
        if getattr(self.model.config, "quantization_config", None):
            return (
                f"decoding: {batched}; this quantized model has no native decode step here (it needs the "
                "microformers-quant kernels built, the CPU, float32 activations and a Llama-style decoder)"
            )
        return f"decoding: {batched}"

    def _check_kv_budget(self, max_kv_tokens: int) -> None:
        """Refuse a KV budget the memory free now (after loading the model) cannot hold: the server would be
        killed for memory under load instead of answering 429."""
        from microformers.errors import InputError

        available = free_memory(self.device)
        fits = available // self.kv_bytes_per_token
        if max_kv_tokens > fits:
            raise InputError(
                f"--max-kv-tokens {max_kv_tokens} (max_kv_tokens) needs {_gib(max_kv_tokens * self.kv_bytes_per_token)} "
                f"of KV cache ({self.kv_bytes_per_token} bytes per token for this model), but {self.device} has "
                f"{_gib(available)} free after loading it: pass --max-kv-tokens {fits} or less, or leave it out "
                "(the default takes half the free memory)"
            )

    def default_kv_tokens(self) -> int:
        """Cache tokens that fit in half the free memory, at least one full context and at most a full
        context for every batch row and queue slot."""
        fits = int(DEFAULT_MEMORY_SHARE * free_memory(self.device)) // self.kv_bytes_per_token
        most = (self.max_batch_size + self.max_queue) * self.context_length
        return max(self.context_length, min(fits, most))

    # -- the public side (any thread) -------------------------------------------------------------
    def cache_tokens(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """The cache positions a request may fill (what it reserves of the budget)."""
        return max(prompt_tokens + 1, min(prompt_tokens + max_new_tokens, self.context_length))

    def submit(self, request: GenerationRequest) -> None:
        needed = self.cache_tokens(len(request.prompt_ids), request.max_new_tokens)
        with self._condition:
            if self._draining or self._stopped:
                raise ShuttingDownError("the server is shutting down and admits no new requests")
            if len(self._waiting) >= self.max_queue:
                raise QueueFullError(f"{len(self._waiting)} requests are waiting (max_queue={self.max_queue})")
            if needed > self.max_kv_tokens:
                raise CacheBudgetError(
                    f"the request needs {needed} cache tokens (prompt and max_tokens), more than the server's "
                    f"whole KV budget of {self.max_kv_tokens}", needed=needed, budget=self.max_kv_tokens, retry=False,
                )  # fmt: skip
            if self._reserved + needed > self.max_kv_tokens:
                raise CacheBudgetError(
                    f"the KV cache budget is full ({self._reserved} of {self.max_kv_tokens} tokens promised to "
                    f"running and waiting requests; this one needs {needed})",
                    needed=needed, budget=self.max_kv_tokens, retry=True,
                )  # fmt: skip
            request.reserved = needed
            self._reserved += needed
            self._waiting.append(request)
            self._condition.notify()

    def stats(self) -> dict[str, int]:
        with self._condition:
            return {
                "running": len(self._running), "waiting": len(self._waiting), "steps": self.steps,
                "prefilling": len(self._prefilling), "prefill_forwards": self.prefill_forwards,
                "prefill_tokens": self.prefill_tokens,
                "kv_tokens_reserved": self._reserved, "kv_tokens_budget": self.max_kv_tokens,
            }  # fmt: skip

    def cache_bytes(self) -> int:
        """Bytes the running rows' cache buffers hold now (their own, and the native step's slab)."""
        slab = self._slab
        return self._cache.nbytes() + (slab.nbytes() if slab is not None else 0)

    def drain(self) -> None:
        """Stop admitting: waiting requests are refused, running ones finish, then the loop ends."""
        with self._condition:
            self._draining = True
            refused = list(self._waiting)
            self._waiting.clear()
            for request in refused:
                self._release(request)
            self._condition.notify()
        for request in refused:
            _safe_emit(request, Event("error", text="the server is shutting down", finish_reason="shutting_down"))

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop after the current step, abandoning running requests (interpreter exit)."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def packed_prefill(self) -> bool | None:
        """Whether prompts are prefilled packed together (``None`` until the loop thread has probed the model)."""
        return self._packing

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the loop (engine thread) -----------------------------------------------------------------
    def _loop(self) -> None:
        _STEP.base = self._base_attention
        with torch.inference_mode():
            if self._packing is None:
                self._packing = self._probe_packing()
            prefilled = 0  # prompt tokens prefilled since the last decoding step
            while True:
                with self._condition:
                    while (
                        not self._waiting and not self._running and not self._prefilling and not self._draining
                        and not self._closed
                    ):  # fmt: skip
                        self._condition.wait()
                    if self._closed or (
                        self._draining and not self._running and not self._waiting and not self._prefilling
                    ):
                        self._stopped = True
                        return
                    while self._waiting and len(self._running) + len(self._prefilling) < self.max_batch_size:
                        self._prefilling.append(self._waiting.popleft())
                self._retire_cancelled()
                if self._prefilling:
                    before = self.prefill_tokens
                    self._prefill_round()
                    prefilled += self.prefill_tokens - before
                    with self._condition:
                        more = bool(self._waiting) and len(self._running) + len(self._prefilling) < self.max_batch_size
                    if (more or self._prefilling) and prefilled < self.prefill_chunk:
                        # requests that arrived during that forward are prefilled first, while the running rows'
                        # wait stays under one chunk's forward: their first tokens come sooner
                        continue
                prefilled = 0
                if self._running:
                    self._step()
                    if not self._running:
                        _return_freed_memory()

    def _guarded(self, request: GenerationRequest, fn: Callable[[GenerationRequest], None]) -> None:
        try:
            fn(request)
        except Exception as exc:
            self._fail(request, exc)

    def _fail(self, request: GenerationRequest, exc: BaseException) -> None:
        """Retire ``request`` alone with an error event."""
        self._remove(request)  # first: a client told of the end may submit again at once
        _safe_emit(request, Event("error", text=f"generation failed: {type(exc).__name__}: {exc}"))

    def _prefill_round(self) -> None:
        """Prefill what one forward takes of the admitted prompts; those now wholly cached join the batch."""
        if not self._packing:  # one prompt at a time, each in one forward, as ``generate`` prefills it
            admitted, self._prefilling = self._prefilling, []
            for request in admitted:
                self._guarded(request, self._admit)
            return
        budget = self.prefill_chunk
        chosen: list[tuple[GenerationRequest, int]] = []
        donors: list[tuple[_RowBuffers, int] | None] = []
        for request in self._prefilling:
            if budget <= 0 or self.prefill_chunk - budget >= self.prefill_group:
                break  # full: the prompts after it come in the next forward, with the first tokens of these out
            donor = None
            if request.buffers is None:
                limit = max(request.reserved, len(request.prompt_ids) + 1)
                request.buffers = _RowBuffers(0, limit, planned=len(request.prompt_ids))
                donor = self._prefix_donor(request, chosen)
                if donor is not None:
                    request.buffers.length = donor[1]
                if request.seed is not None:
                    request.generator = torch.Generator().manual_seed(request.seed)
            count = min(budget, len(request.prompt_ids) - request.buffers.length)
            chosen.append((request, count))
            donors.append(donor)
            budget -= count
        try:
            logits = self._packed_forward(
                self._cache,
                [(r.buffers, r.prompt_ids[r.buffers.length : r.buffers.length + n]) for r, n in chosen],  # type: ignore[union-attr]
                donors,
            )
        except Exception:  # which prompts fail on their own? each is prefilled alone, and only those are retired
            for request, _count in chosen:
                self._prefilling.remove(request)
                request.buffers = None
                self._guarded(request, self._admit)
            return
        for index, (request, _count) in enumerate(chosen):
            row = request.buffers
            assert row is not None
            if row.length < len(request.prompt_ids):
                continue  # more chunks to come, after the running rows' next step
            self._prefilling.remove(request)
            request.buffers = None
            self._cache.add_prefilled_row(row)
            request.length = row.length
            self._running.append(request)
            self._guarded(request, lambda r, i=index: self._accept(r, self._choose(r, logits[i])))

    def _prefix_donor(
        self, request: GenerationRequest, chosen: list[tuple[GenerationRequest, int]]
    ) -> tuple[_RowBuffers, int] | None:
        """The row whose cache holds the longest beginning of ``request``'s prompt (a running row, or a prompt
        prefilled in this forward before it), and how many positions it can give; ``None`` when none shares any.
        At least the last prompt token is left to compute: its logits choose the first new token."""
        prompt = request.prompt_ids
        candidates = [(row, r.prompt_ids, len(r.prompt_ids)) for row, r in zip(self._cache._rows, self._running)]
        candidates += [(r.buffers, r.prompt_ids, r.buffers.length + n) for r, n in chosen if r.buffers is not None]
        best: tuple[_RowBuffers, int] | None = None
        for row, ids, covered in candidates:
            limit = min(covered, len(prompt) - 1, len(ids))
            shared = 0
            while shared < limit and ids[shared] == prompt[shared]:
                shared += 1
            if shared and (best is None or shared > best[1]):
                best = (row, shared)
        return best

    def _packed_forward(
        self,
        cache: RaggedCache,
        segments: list[tuple[_RowBuffers, list[int]]],
        donors: Sequence[tuple[_RowBuffers, int] | None] | None = None,
    ) -> torch.Tensor:
        """One forward over ``segments`` (a row and the prompt ids it takes next) packed into one sequence;
        returns the float32 logits ``(segments, vocab)`` of each segment's last position. ``donors``: see
        :meth:`RaggedCache.begin_packed`."""
        ids: list[int] = []
        positions: list[int] = []
        last: list[int] = []
        for row, tokens in segments:
            ids.extend(tokens)
            positions.extend(range(row.length, row.length + len(tokens)))
            last.append(len(ids) - 1)
        cache.begin_packed([(row, len(tokens)) for row, tokens in segments], donors)
        _STEP.lengths = None
        _STEP.packed = True
        _STEP.cache = cache
        kept = False
        try:
            outputs = self.model(
                input_ids=torch.tensor([ids], dtype=torch.long, device=self.device),
                position_ids=torch.tensor([positions], dtype=torch.long, device=self.device),
                past_key_values=cache, use_cache=True, return_dict=True,
                logits_to_keep=torch.tensor(last, dtype=torch.long, device=self.device),
            )  # fmt: skip
            if cache.updates == 0 or cache.hits != cache.updates:
                raise RuntimeError("the model's attention did not take the packed prefill's per-row states")
            logits = outputs.logits[0]
            if logits.shape[0] == len(ids) != len(last):  # a head that kept every position
                logits = logits[last]
            if logits.shape[0] != len(last):
                raise RuntimeError(f"the model returned logits for {logits.shape[0]} positions, not {len(last)}")
            kept = True
        finally:
            _STEP.packed = False
            _STEP.cache = None
            cache.end_packed(keep=kept)
        self.prefill_forwards += 1
        self.prefill_tokens += len(ids)
        return logits.to(dtype=torch.float32)

    def _probe_packing(self) -> bool:
        """Whether this model can prefill packed prompts: two copies of a short prompt packed in one forward must
        score like the prompt alone (a model that ignores ``position_ids``, or mixes positions outside the
        attention function, fails here and is prefilled one prompt at a time)."""
        vocab = max(self.vocab_rows, 1)
        prompt = [i % vocab for i in (1, 2, 3, 4)]
        try:
            alone = self._packed_forward(RaggedCache(), [(_RowBuffers(0, 5), prompt)])
            cache, row = RaggedCache(), _RowBuffers(0, 5)
            self._packed_forward(cache, [(row, prompt[:2])])  # a first chunk, continued below
            packed = self._packed_forward(cache, [(_RowBuffers(0, 5), prompt), (row, prompt[2:])])
        except Exception:
            return False
        finally:
            self.prefill_forwards = self.prefill_tokens = 0
        scale = float(alone.abs().max()) + 1.0
        # other shapes, so equal up to rounding; a wrong position or a leak between segments is far larger
        return bool(torch.isfinite(packed).all() and ((packed - alone).abs().max() <= 1e-3 * scale))

    def _admit(self, request: GenerationRequest) -> None:
        if request.cancelled:
            self._remove(request)
            return
        if request.seed is not None:
            request.generator = torch.Generator().manual_seed(request.seed)
        self.prefill_forwards += 1
        self.prefill_tokens += len(request.prompt_ids)
        ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=self.device)
        positions = torch.arange(ids.shape[1], device=self.device).unsqueeze(0)
        _STEP.lengths = None
        self._stepping = [request]
        self._cache.begin_prefill(request.reserved or self.cache_tokens(ids.shape[1], request.max_new_tokens))
        added = None
        try:
            outputs = self.model(
                input_ids=ids, position_ids=positions, past_key_values=self._cache, use_cache=True,
                logits_to_keep=1, return_dict=True,
            )  # fmt: skip
            added = self._cache.end_prefill(keep=True)
        finally:
            self._stepping = []
            if added is None:
                self._cache.end_prefill(keep=False)
        if added is None:
            raise RuntimeError("the model wrote nothing into the serving cache during the prefill")
        logits = outputs.logits[:, -1, :].to(dtype=torch.float32)
        del outputs
        request.length = ids.shape[1]
        self._running.append(request)
        token = self._choose(request, logits[0])
        self._accept(request, token)

    def _step(self) -> None:
        """One decoding step for every running row; a batch that fails is re-run row by row."""
        rows = list(self._running)
        try:
            logits = self._forward(rows)
        except Exception as exc:
            if len(rows) == 1:
                self._fail(rows[0], exc)
                return
            for request in rows:  # which rows fail on their own? only those are retired
                if request not in self._running:
                    continue
                try:
                    self._finish_step([request], self._forward([request]))
                except Exception as exc:
                    if request in self._running:
                        self._fail(request, exc)
            return
        self._finish_step(rows, logits)

    def _forward(self, rows: list[GenerationRequest]) -> torch.Tensor:
        """The next-token logits ``(rows, vocab)`` in float32; every row's cache advances one position."""
        if self._native is not None and len(rows) <= self.native_rows:
            try:
                logits = self._native_forward(rows)
                if logits is not None:
                    return logits
            except NotNativeError as exc:  # nothing was counted: the batched step serves this and every later step
                self._native = None
                logger.warning("microformers serve: %s; decoding with the batched eager step from now on", exc)
        self._unslab()
        cache = self._cache
        indices = [self._running.index(r) for r in rows]
        for _attempt in range(2):
            cache.begin_step(indices)
            lengths_list = [cache._rows[i].length for i in indices]
            lengths = torch.tensor(lengths_list, dtype=torch.long, device=self.device)
            longest = max(lengths_list) + 1
            ids = torch.tensor([[r.output_ids[-1]] for r in rows], dtype=torch.long, device=self.device)
            mask = (torch.arange(longest, device=self.device)[None, :] <= lengths[:, None])[:, None, None, :]
            _STEP.lengths = [n + 1 for n in lengths_list]
            _STEP.cache = cache
            self._stepping = rows
            try:
                outputs = self.model(
                    input_ids=ids, attention_mask=mask, position_ids=lengths[:, None], past_key_values=cache,
                    use_cache=True, logits_to_keep=1, return_dict=True,
                )  # fmt: skip
            except Exception:
                if cache.stacked or cache.hits == cache.updates:
                    raise
                cache.stacked = True  # the model attended over the states by itself: give it padded ones
                continue
            finally:
                _STEP.lengths = None
                _STEP.cache = None
                self._stepping = []
            if not cache.stacked and cache.hits != cache.updates:
                cache.stacked = True
                continue
            cache.advance_rows()
            self.steps += 1
            return outputs.logits[:, -1, :].to(dtype=torch.float32)
        raise RuntimeError("the model's attention does not take the serving cache's states")

    def _native_forward(self, rows: list[GenerationRequest]) -> torch.Tensor | None:
        """:meth:`_forward` through the native decode step, all rows in one call over the slab (:class:`_Slab`);
        None (nothing done) where the slab does not fit the KV budget's unpromised part. A forward that fails
        advances nothing (the step writes the shared column and is counted only after it)."""
        native = self._native
        assert native is not None
        buffers = [self._cache._rows[self._running.index(r)] for r in rows]
        slab = self._slab_for(buffers)
        if slab is None:
            return None
        cursor = slab.cursor
        lengths = torch.tensor([row.length for row in buffers], dtype=torch.long, device=self.device)
        # a row's own columns: from its start (cursor - length) through the new one at cursor
        mask = (torch.arange(cursor + 1, device=self.device)[None, :] >= (cursor - lengths)[:, None]).long()
        ids = torch.tensor([[r.output_ids[-1]] for r in rows], dtype=torch.long, device=self.device)
        view = slab.view()
        calls = native.calls
        self._stepping = rows
        try:
            with decoding_with(self.model, native):
                outputs = self.model(
                    input_ids=ids, attention_mask=mask, position_ids=lengths[:, None], past_key_values=view,
                    use_cache=True, logits_to_keep=1, return_dict=True,
                )  # fmt: skip
        finally:
            self._stepping = []
        if native.calls != calls + 1 or view.get_seq_length() != cursor + 1:
            raise NotNativeError("the model did not take its static step over the serving rows")
        slab.cursor += 1
        for row in buffers:
            row.length += 1
        self.steps += 1
        self.native_steps += 1
        return outputs.logits[:, -1, :].to(dtype=torch.float32)

    def _slab_for(self, buffers: list[_RowBuffers]) -> _Slab | None:
        """The slab holding exactly ``buffers`` in this order with a free column, rebuilt when the rows changed
        or it is full: each row's positions come from the old slab where it was there, else from its buffers.

        None where a new slab would not fit in the KV budget's part no request has been promised: the rows'
        own buffers stay allocated beside it, and its rows are padded to the longest, so it is memory beyond
        what the budget counts (that step decodes batched from the rows' buffers instead)."""
        old = self._slab
        if old is not None and len(old.rows) == len(buffers) and all(a is b for a, b in zip(old.rows, buffers)):
            if old.cursor < old.capacity:
                return old
        where = {id(row): index for index, row in enumerate(old.rows)} if old is not None else {}
        cursor = max(row.length for row in buffers)
        # no row grows past its limit: the columns after the cursor never need to reach past its start + limit
        most = max(cursor - row.length + row.limit for row in buffers)
        capacity = max(cursor + 1, min(cursor + max(ROW_GROWTH, cursor // 4), most))
        if len(buffers) * capacity > self.max_kv_tokens - self._reserved:
            return None
        template = buffers[0].keys[0]
        layers = len(buffers[0].keys)
        shape = (len(buffers), template.shape[1], capacity, template.shape[3])
        keys = [template.new_zeros(shape) for _ in range(layers)]
        values = [template.new_zeros(shape) for _ in range(layers)]
        slab = _Slab(buffers, keys, values, cursor)
        for index, row in enumerate(buffers):
            target = slab.columns(index, row.length)
            source = where.get(id(row))
            for layer in range(layers):
                if source is not None and old is not None:
                    keys[layer][index, :, target] = old.keys[layer][source, :, old.columns(source, row.length)]
                    values[layer][index, :, target] = old.values[layer][source, :, old.columns(source, row.length)]
                else:
                    keys[layer][index, :, target] = row.keys[layer][0, :, : row.length]
                    values[layer][index, :, target] = row.values[layer][0, :, : row.length]
        if old is not None:  # running rows it held that the new one does not: their positions back to their buffers
            kept = {id(row) for row in buffers}
            self._copy_back(old, [row for row in old.rows if id(row) not in kept])
        self._slab = slab
        return slab

    def _copy_back(self, slab: _Slab, rows: Sequence[_RowBuffers]) -> None:
        """Copy the positions of those of ``rows`` still running from ``slab`` into their own buffers."""
        running = {id(row) for row in self._cache._rows}
        for index, row in enumerate(slab.rows):
            if id(row) not in running or not any(row is r for r in rows):
                continue  # finished (its buffers are gone), or not asked for
            row.ensure(row.length)
            columns = slab.columns(index, row.length)
            for layer in range(len(row.keys)):
                row.keys[layer][0, :, : row.length] = slab.keys[layer][index, :, columns]
                row.values[layer][0, :, : row.length] = slab.values[layer][index, :, columns]

    def _unslab(self) -> None:
        """Copy every running row's positions from the slab back into its own buffers and drop the slab (before
        a step that decodes from the buffers)."""
        slab, self._slab = self._slab, None
        if slab is not None:
            self._copy_back(slab, slab.rows)

    def _finish_step(self, rows: list[GenerationRequest], logits: torch.Tensor) -> None:
        # one pass over the scores: a row's maximum is NaN (torch.max propagates it), +inf, or -inf (all -inf)
        # exactly when nothing can be chosen from it, and its index is argmax's (the first maximum)
        best, greedy_ids = logits.max(dim=-1)
        unusable = (~torch.isfinite(best)).tolist()
        greedy = greedy_ids.tolist()
        for index, request in enumerate(rows):
            request.length += 1
            if unusable[index]:
                self._fail(request, FloatingPointError("the model's scores for this request are not finite"))
                continue
            plain = request.temperature == 0 and not request.frequency_penalty and not request.presence_penalty
            self._guarded(
                request, lambda r, i=index, p=plain: self._accept(r, greedy[i] if p else self._choose(r, logits[i]))
            )

    def _choose(self, request: GenerationRequest, logits: torch.Tensor) -> int:
        logits = logits.cpu()  # one row; the seeded generator is a CPU one
        if request.frequency_penalty or request.presence_penalty:
            logits = logits.clone()
            for token, count in request.counts.items():
                logits[token] -= request.frequency_penalty * count + request.presence_penalty
        if request.temperature != 0:
            logits = logits / request.temperature
        if bool(_unusable_rows(logits[None])[0]):
            raise FloatingPointError(
                f"the scores are not finite after the penalties and temperature={request.temperature}"
            )
        if request.temperature == 0:
            return int(logits.argmax())
        if request.top_p < 1.0:
            ordered, order = torch.sort(logits, descending=False)
            cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
            remove = cumulative <= (1 - request.top_p)
            remove[-1] = False  # the most likely token always stays
            logits = logits.masked_fill(remove.scatter(0, order, remove), float("-inf"))
        probs = logits.softmax(dim=-1)
        return int(torch.multinomial(probs, 1, generator=request.generator))

    def _accept(self, request: GenerationRequest, token: int) -> None:
        """Record one new token: text delta, stop strings, EOS and length limits."""
        request.output_ids.append(token)
        request.counts[token] = request.counts.get(token, 0) + 1
        finish = None
        if token in self.eos_ids:
            finish = "stop"
            text = self.tokenizer.decode(request.output_ids[:-1], skip_special_tokens=True)
        else:
            text = self.tokenizer.decode(request.output_ids, skip_special_tokens=True)
        if request.stop:
            start = max(0, request.sent - max(len(s) for s in request.stop))
            hits = [i for i in (text.find(s, start) for s in request.stop) if i >= 0]
            if hits:
                text, finish = text[: min(hits)], "stop"
        if finish is None and (
            len(request.output_ids) >= request.max_new_tokens or request.length + 1 >= self.context_length
        ):
            finish = "length"
        request.text = text
        if finish is None:
            ready = len(text)
            if text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for its next bytes
                ready = len(text.rstrip("\ufffd"))
            if request.stop:  # hold back what may become a stop string
                if request.stop_tables is None:
                    request.stop_tables = [_prefix_table(stop) for stop in request.stop]
                for stop, table in zip(request.stop, request.stop_tables, strict=True):
                    ready -= _partial_stop(text[max(0, ready - len(stop)) : ready], stop, table)
        else:
            ready = len(text)
        if ready > request.sent:
            _safe_emit(request, Event("delta", text=text[request.sent : ready]))
            request.sent = ready
        if finish is not None:
            self._remove(request)  # first: a client told of the end may submit again at once
            _safe_emit(
                request,
                Event(
                    "done", finish_reason=finish, prompt_tokens=len(request.prompt_ids),
                    completion_tokens=len(request.output_ids),
                ),
            )  # fmt: skip

    def _retire_cancelled(self) -> None:
        for request in [r for r in (*self._prefilling, *self._running) if r.cancelled]:
            self._remove(request)

    def _remove(self, request: GenerationRequest) -> None:
        """Take ``request`` out of the batch (if it is there), free its cache rows and its reservation."""
        if request in self._running:
            row = self._running.index(request)
            self._cache.remove_row(row)
            del self._running[row]
            if not self._running:
                self._slab = None
        elif request in self._prefilling:
            self._prefilling.remove(request)
            request.buffers = None
        with self._condition:
            self._release(request)

    def _release(self, request: GenerationRequest) -> None:
        self._reserved -= request.reserved
        request.reserved = 0


def _unusable_rows(logits: torch.Tensor) -> torch.Tensor:
    """Rows of ``(rows, vocab)`` scores nothing can be chosen from: a NaN, a +inf, or all -inf."""
    return torch.isnan(logits).any(dim=-1) | torch.isposinf(logits).any(dim=-1) | torch.isneginf(logits).all(dim=-1)


def _glibc() -> Any:
    """The C library when it is glibc (``malloc_trim`` and ``mallopt``), else None."""
    global _GLIBC
    if _GLIBC is None:
        try:
            library = ctypes.CDLL("libc.so.6")
            _GLIBC = library if hasattr(library, "malloc_trim") and hasattr(library, "mallopt") else False
        except OSError:
            _GLIBC = False
    return _GLIBC or None


def _return_freed_memory() -> None:
    """Hand the heap pages freed by finished rows back to the system: glibc's allocator keeps them otherwise,
    so an idle server would go on holding its busiest moment's cache. A no-op without glibc."""
    glibc = _glibc()
    if glibc is not None:
        glibc.malloc_trim(0)


# glibc's mallopt parameters, and the values the server pins them to
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_TRIM_THRESHOLD_BYTES, _MMAP_THRESHOLD_BYTES = 8 * 2**20, 32 * 2**20


def _bound_heap_retention() -> None:
    """Pin glibc's trim and mmap thresholds: by default freeing a large block raises both (the trim threshold to
    twice the block), and ``malloc_trim`` never shrinks the top of a thread's own heap, so the engine thread's
    heap kept tens of MiB of a finished long request's buffers. Pinned, a thread's heap gives back any free top
    over 8 MiB as blocks are freed, and blocks under 32 MiB (the most the default ever raises it to) stay on the
    heap instead of costing an mmap each. A no-op without glibc."""
    glibc = _glibc()
    if glibc is not None:
        glibc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        glibc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)


_GLIBC: Any = None


def _close_at_exit(engine_ref: weakref.ref[Engine]) -> None:
    engine = engine_ref()
    if engine is not None:
        engine.close()


def _safe_emit(request: GenerationRequest, event: Event) -> None:
    try:
        request.emit(event)
    except Exception:  # a listener that went away must not break the loop
        request.cancelled = True

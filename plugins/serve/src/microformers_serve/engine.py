"""The continuous-batching engine: one decode loop on a background thread.

Between two decoding steps the loop admits waiting requests (each prompt is prefilled on its own,
exactly as ``model.generate`` prefills it, then joined to the running batch) and retires finished or
abandoned ones, so a long request never holds up a short one.

Every running sequence keeps its own cache rows and positions in a :class:`RaggedCache`: row ``i``
holds its ``length_i`` keys/values left-aligned, and its new token sits at position ``length_i``.
The batched forward runs the projections and MLPs for all rows at once; attention is computed row
by row over that row's own keys only (the ``serve_ragged`` attention implementation), with the same
shapes a lone ``generate`` call has, so no padding enters any sum. What remains batch-dependent is
the matrix multiplication itself (BLAS blocks a 16-row product differently from a 1-row one, ~1e-6
in the logits), which is why greedy outputs equal single-request ``generate`` outputs token for token
except at exact near-ties of the two best logits; the tests check the identity on concurrent,
staggered requests.
"""

from __future__ import annotations

import atexit
import collections
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from microformers_sdk.cache import Cache, DynamicCache

RAGGED_ATTENTION = "serve_ragged"

# What the decode step tells the ragged attention function (engine thread only).
_STEP = threading.local()


class QueueFullError(Exception):
    """The waiting queue holds ``max_queue`` requests already."""


class ShuttingDownError(Exception):
    """The engine no longer admits requests."""


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

    def cancel(self) -> None:
        """Free this request's slot at the next step (a client went away)."""
        self.cancelled = True


class RaggedCache(Cache):
    """Per-row key/value storage for sequences of different lengths (rows left-aligned, no padding).

    ``update`` writes each row's new states at that row's own length and returns the storage up
    to the longest row; a decoding step then advances every row by one (:meth:`advance_rows`).
    Rows are added from a prefilled cache and removed by moving the last row into the hole.
    """

    def __init__(self) -> None:
        super().__init__()
        self.row_lengths: list[int] = []
        self._index: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def rows(self) -> int:
        return len(self.row_lengths)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.row_lengths, default=0)

    def _capacity(self) -> tuple[int, int]:
        if not self._keys:
            return 0, 0
        return self._keys[0].shape[0], self._keys[0].shape[2]

    def _ensure(self, rows: int, positions: int, like: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        have_rows, have_positions = self._capacity()
        if rows <= have_rows and positions <= have_positions:
            return
        new_rows = max(rows, have_rows)
        new_positions = max(positions, have_positions + max(64, have_positions // 2)) if positions > have_positions else have_positions
        for layer_idx, (keys, values) in enumerate(like):
            new_keys = keys.new_zeros(new_rows, keys.shape[1], new_positions, keys.shape[3])
            new_values = values.new_zeros(new_rows, values.shape[1], new_positions, values.shape[3])
            if layer_idx < len(self._keys) and have_rows:
                new_keys[:have_rows, :, :have_positions].copy_(self._keys[layer_idx])
                new_values[:have_rows, :, :have_positions].copy_(self._values[layer_idx])
                self._keys[layer_idx], self._values[layer_idx] = new_keys, new_values
            else:
                self._keys.append(new_keys)
                self._values.append(new_values)
        self._lengths = [0] * len(self._keys)

    def reserve(self, rows: int, positions: int) -> None:
        """Room for ``rows`` rows of ``positions`` positions (storage grows geometrically)."""
        if self._keys:
            self._ensure(rows, positions, list(zip(self._keys, self._values, strict=True)))

    def add_row(self, prefilled: Cache, max_rows: int) -> int:
        """Copy a one-row prefilled cache in as a new row; return its index."""
        layers = [prefilled[i] for i in range(len(prefilled))]
        length = layers[0][0].shape[2]
        row = self.rows
        self._ensure(max(row + 1, max_rows), length + 1, layers)
        for layer_idx, (keys, values) in enumerate(layers):
            self._keys[layer_idx][row, :, :length].copy_(keys[0])
            self._values[layer_idx][row, :, :length].copy_(values[0])
        self.row_lengths.append(length)
        return row

    def remove_row(self, row: int) -> None:
        """Drop ``row``; the last row moves into its place."""
        last = self.rows - 1
        if row != last:
            length = self.row_lengths[last]
            for layer_idx in range(len(self._keys)):
                self._keys[layer_idx][row, :, :length].copy_(self._keys[layer_idx][last, :, :length])
                self._values[layer_idx][row, :, :length].copy_(self._values[layer_idx][last, :, :length])
            self.row_lengths[row] = length
        self.row_lengths.pop()

    def begin_step(self) -> None:
        device = self._keys[0].device if self._keys else None
        self._index = torch.tensor(self.row_lengths, dtype=torch.long, device=device)

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = key.shape[0]
        if key.shape[2] != 1 or rows != self.rows or self._index is None:
            raise RuntimeError("RaggedCache takes one new token per running row per step")
        batch_index = torch.arange(rows, device=key.device)
        self._keys[layer_idx][batch_index, :, self._index] = key[:, :, 0]
        self._values[layer_idx][batch_index, :, self._index] = value[:, :, 0]
        end = max(self.row_lengths) + 1
        return self._keys[layer_idx][:rows, :, :end], self._values[layer_idx][:rows, :, :end]

    def advance_rows(self) -> None:
        self.row_lengths = [length + 1 for length in self.row_lengths]
        self._index = None


def ragged_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> torch.Tensor:
    """Attention for the engine's model: during a decode step, each row over its own keys only.

    Outside a decode step (a prefill, or a call from another thread) it is the model's usual
    implementation. Inside one, row ``i`` attends over its first ``lengths[i]`` keys with no mask,
    the very call a lone ``generate`` step makes, so no padded position enters its sums.
    """
    base = getattr(_STEP, "base", None)
    lengths = getattr(_STEP, "lengths", None)
    if base is None:
        from microformers_sdk.attention import sdpa_attention

        base = sdpa_attention
    if lengths is None or query.shape[2] != 1 or len(lengths) != query.shape[0]:
        return base(query, key, value, attention_mask, **kwargs)
    kwargs["is_causal"] = False
    outputs = [
        base(query[i : i + 1], key[i : i + 1, :, :length], value[i : i + 1, :, :length], None, **kwargs)
        for i, length in enumerate(lengths)
    ]
    return torch.cat(outputs, dim=0)


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


class Engine:
    """Continuous batching for one causal LM and its tokenizer.

    ``submit(request)`` queues a request (``QueueFullError`` past ``max_queue`` waiting,
    ``ShuttingDownError`` after :meth:`drain`); the loop thread prefills it, decodes it together
    with every other running request, and calls ``request.emit`` with text deltas and a final
    ``"done"`` event.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int = 16, max_queue: int = 256) -> None:
        from microformers_sdk.attention import attention_implementation_name, get_attention_function

        if max_batch_size < 1 or max_queue < 0:
            raise ValueError(f"max_batch_size must be >= 1 and max_queue >= 0, got {max_batch_size}, {max_queue}")
        self.model = model.eval()
        self.device = model.device
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self.context_length = context_length(model)
        self.eos_ids = _eos_ids(model)
        self.vocab_rows = model.get_input_embeddings().num_embeddings
        config = model.config
        name = attention_implementation_name(config)
        if name != RAGGED_ATTENTION:
            self._base_attention = get_attention_function(name)
            config._attn_implementation = RAGGED_ATTENTION
        else:
            self._base_attention = get_attention_function("sdpa")
        self._waiting: collections.deque[GenerationRequest] = collections.deque()
        self._running: list[GenerationRequest] = []
        self._cache = RaggedCache()
        self._condition = threading.Condition()
        self._draining = False
        self._stopped = False
        self._closed = False
        self.steps = 0
        self._thread = threading.Thread(target=self._loop, name="microformers-serve-engine", daemon=True)
        self._thread.start()
        atexit.register(_close_at_exit, weakref.ref(self))

    # -- the public side (any thread) -------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> None:
        with self._condition:
            if self._draining or self._stopped:
                raise ShuttingDownError("the server is shutting down and admits no new requests")
            if len(self._waiting) >= self.max_queue:
                raise QueueFullError(f"{len(self._waiting)} requests are waiting (max_queue={self.max_queue})")
            self._waiting.append(request)
            self._condition.notify()

    def stats(self) -> dict[str, int]:
        with self._condition:
            return {"running": len(self._running), "waiting": len(self._waiting), "steps": self.steps}

    def drain(self) -> None:
        """Stop admitting: waiting requests are refused, running ones finish, then the loop ends."""
        with self._condition:
            self._draining = True
            refused = list(self._waiting)
            self._waiting.clear()
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
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the loop (engine thread) -----------------------------------------------------------------
    def _loop(self) -> None:
        _STEP.base = self._base_attention
        with torch.inference_mode():
            while True:
                with self._condition:
                    while not self._waiting and not self._running and not self._draining and not self._closed:
                        self._condition.wait()
                    if self._closed or (self._draining and not self._running and not self._waiting):
                        self._stopped = True
                        return
                    admit = []
                    while self._waiting and len(self._running) + len(admit) < self.max_batch_size:
                        admit.append(self._waiting.popleft())
                for request in admit:
                    self._guarded(request, self._admit)
                self._retire_cancelled()
                if self._running:
                    try:
                        self._step()
                    except Exception as exc:  # a broken step fails the batch, never the loop
                        for request in list(self._running):
                            _safe_emit(request, Event("error", text=f"generation failed: {exc}"))
                            self._remove(request)

    def _guarded(self, request: GenerationRequest, fn: Callable[[GenerationRequest], None]) -> None:
        try:
            fn(request)
        except Exception as exc:
            _safe_emit(request, Event("error", text=f"generation failed: {type(exc).__name__}: {exc}"))
            if request in self._running:
                self._remove(request)

    def _admit(self, request: GenerationRequest) -> None:
        if request.cancelled:
            return
        if request.seed is not None:
            request.generator = torch.Generator().manual_seed(request.seed)
        ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=self.device)
        prefilled = DynamicCache()
        positions = torch.arange(ids.shape[1], device=self.device).unsqueeze(0)
        _STEP.lengths = None
        outputs = self.model(
            input_ids=ids, position_ids=positions, past_key_values=prefilled, use_cache=True,
            logits_to_keep=1, return_dict=True,
        )  # fmt: skip
        logits = outputs.logits[:, -1, :].to(dtype=torch.float32)
        request.length = ids.shape[1]
        self._cache.add_row(outputs.past_key_values, self.max_batch_size)
        self._running.append(request)
        token = self._choose(request, logits[0])
        self._accept(request, token)

    def _step(self) -> None:
        rows = self._running
        cache = self._cache
        lengths = torch.tensor(cache.row_lengths, dtype=torch.long, device=self.device)
        longest = max(cache.row_lengths) + 1
        cache.reserve(len(rows), longest)
        ids = torch.tensor([[r.output_ids[-1]] for r in rows], dtype=torch.long, device=self.device)
        mask = (torch.arange(longest, device=self.device)[None, :] <= lengths[:, None])[:, None, None, :]
        cache.begin_step()
        _STEP.lengths = [int(n) + 1 for n in cache.row_lengths]
        try:
            outputs = self.model(
                input_ids=ids, attention_mask=mask, position_ids=lengths[:, None], past_key_values=cache,
                use_cache=True, logits_to_keep=1, return_dict=True,
            )  # fmt: skip
        finally:
            _STEP.lengths = None
        cache.advance_rows()
        self.steps += 1
        logits = outputs.logits[:, -1, :].to(dtype=torch.float32)
        greedy = logits.argmax(dim=-1).tolist()
        for index, request in enumerate(list(rows)):
            request.length += 1
            plain = request.temperature == 0 and not request.frequency_penalty and not request.presence_penalty
            token = greedy[index] if plain else self._choose(request, logits[index])
            self._guarded(request, lambda r, t=token: self._accept(r, t))

    def _choose(self, request: GenerationRequest, logits: torch.Tensor) -> int:
        logits = logits.cpu()  # one row; the seeded generator is a CPU one
        if request.frequency_penalty or request.presence_penalty:
            logits = logits.clone()
            for token, count in request.counts.items():
                logits[token] -= request.frequency_penalty * count + request.presence_penalty
        if request.temperature == 0:
            return int(logits.argmax())
        logits = logits / request.temperature
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
            for stop in request.stop:  # hold back what may become a stop string
                for size in range(min(len(stop) - 1, ready), 0, -1):
                    if text[:ready].endswith(stop[:size]):
                        ready -= size
                        break
        else:
            ready = len(text)
        if ready > request.sent:
            _safe_emit(request, Event("delta", text=text[request.sent : ready]))
            request.sent = ready
        if finish is not None:
            _safe_emit(
                request,
                Event(
                    "done", finish_reason=finish, prompt_tokens=len(request.prompt_ids),
                    completion_tokens=len(request.output_ids),
                ),
            )  # fmt: skip
            self._remove(request)

    def _retire_cancelled(self) -> None:
        for request in [r for r in self._running if r.cancelled]:
            self._remove(request)

    def _remove(self, request: GenerationRequest) -> None:
        row = self._running.index(request)
        self._cache.remove_row(row)
        last = self._running.pop()
        if last is not request:
            self._running[row] = last


def _close_at_exit(engine_ref: weakref.ref[Engine]) -> None:
    engine = engine_ref()
    if engine is not None:
        engine.close()


def _safe_emit(request: GenerationRequest, event: Event) -> None:
    try:
        request.emit(event)
    except Exception:  # a listener that went away must not break the loop
        request.cancelled = True

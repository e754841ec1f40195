"""Decoding steps into a preallocated :class:`~microformers_sdk.cache.StaticCache` (fixed shapes, compilable).

A *static step* feeds one token per row into a prefilled ``StaticCache`` that still has room. Each
attention layer then writes its new key/value straight into the cache storage at
``cache_position`` and attends over the whole capacity, the positions not written yet masked out,
so every step has the same tensor shapes and ``torch.compile`` of the decoder compiles once per
batch size and cache length (as gpt-fast does). A decoder uses the three functions here:

* :func:`static_step_position` in its input preparation: the one-element ``cache_position`` tensor
  when this call is a static step, else ``None`` (then the ordinary cache ``update`` path runs);
* :func:`visible_storage` for the step's mask over the storage;
* :func:`one_query_attention` in each attention layer for the step itself, with
  ``Cache.layer_storage`` / ``Cache.advance`` to write into the storage and count the new position.

A pre-norm decoder with a SwiGLU MLP (the Llama layout) can also describe its layers as
:class:`DecoderLayerParts` and ask :func:`native_decoder_step` for a step that runs every layer in
one native call, when the type of its linear layers provides one (quantized layers do).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs
import torch
from torch import nn

from .cache import Cache, StaticCache

__all__ = [
    "DecoderLayerParts",
    "DecoderStepShape",
    "NativeDecoderStep",
    "native_decoder_step",
    "one_query_attention",
    "static_step_position",
    "visible_storage",
]


def static_step_position(
    cache: Cache | None, embeds: torch.Tensor, windows: Iterable[int | None], num_layers: int
) -> torch.Tensor | None:
    """``cache_position`` (``[past]``) when one token per row goes into a prefilled ``StaticCache`` with room left.

    ``None`` (use the ordinary path) while gradients are on, for a prompt, for an empty or full cache,
    for a batch that differs from the storage's, and when a sliding window shorter than the storage
    would need the usual windowed mask.
    """
    if not isinstance(cache, StaticCache) or embeds.shape[1] != 1 or torch.is_grad_enabled():
        return None
    past = cache.get_seq_length()
    if past == 0 or past >= cache.max_cache_len or len(cache) != num_layers:
        return None
    if any(window is not None and window < cache.max_cache_len for window in windows):
        return None
    if cache.layer_storage(0)[0].shape[0] != embeds.shape[0]:
        return None
    return torch.tensor([past], device=embeds.device)


def visible_storage(
    capacity: int, past: int, attention_mask: torch.Tensor | None, embeds: torch.Tensor
) -> torch.Tensor:
    """Which of the ``capacity`` stored positions the step's token attends to: boolean ``(batch or 1, 1, 1, capacity)``.

    Positions up to and including ``past`` (the new one) are visible, minus padding from a 2-D
    ``attention_mask``. A row with no real token yet (a padding step under left padding) sees every
    written position instead of none, as :func:`~microformers_sdk.masks.build_attention_mask` does,
    so its softmax stays finite and no NaN reaches the stored states.
    """
    batch, device = embeds.shape[0], embeds.device
    visible = (torch.arange(capacity, device=device) <= past).view(1, 1, 1, capacity)
    if attention_mask is None or attention_mask.dim() != 2 or bool(attention_mask[:, : past + 1].all()):
        return visible
    seen = attention_mask[:, : past + 1].bool()
    seen = seen | ~seen.any(dim=-1, keepdim=True)
    padding = torch.ones(batch, capacity, dtype=torch.bool, device=device)
    padding[:, : past + 1] = seen
    return visible & padding[:, None, None, :]


def one_query_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, scaling: float
) -> torch.Tensor:
    """Attention of one query per row ``(batch, heads, 1, head_dim)`` over the whole storage, ``visible`` selecting keys.

    Query heads are grouped by the key/value head they share, so the cache is never repeated; the
    softmax runs in float32.
    """
    batch, heads, _, head_dim = query.shape
    kv_heads = keys.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)
    scores = torch.matmul(grouped, keys.transpose(2, 3)) * scaling
    scores = scores.masked_fill(~visible, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(values.dtype)
    return torch.matmul(weights, values).reshape(batch, heads, 1, head_dim)


@attrs.frozen
class DecoderLayerParts:
    """One pre-norm decoder layer as a native step reads it: ``h + o_proj(attention(q, k, v))`` with
    ``q, k, v = q/k/v_proj(input_norm(h))`` rotated by the half-split rotary embedding, then
    ``h + down_proj(silu(gate_proj(x)) * up_proj(x))`` with ``x = post_norm(h)``; both norms are
    :class:`~microformers_sdk.layers.RMSNorm`."""

    input_norm: nn.Module
    q_proj: nn.Module
    k_proj: nn.Module
    v_proj: nn.Module
    o_proj: nn.Module
    post_norm: nn.Module
    gate_proj: nn.Module
    up_proj: nn.Module
    down_proj: nn.Module

    @property
    def linears(self) -> tuple[nn.Module, ...]:
        """q, k, v, o, gate, up, down."""
        return (self.q_proj, self.k_proj, self.v_proj, self.o_proj, self.gate_proj, self.up_proj, self.down_proj)


@attrs.frozen
class DecoderStepShape:
    """The attention geometry every layer of the step shares."""

    heads: int
    kv_heads: int
    head_dim: int
    scaling: float


# (hidden (rows, 1, hidden), cos, sin (rows, 1, head_dim), visible (rows or 1, 1, 1, capacity) bool,
#  [(key storage, value storage) per layer], position) -> hidden after the last layer (before the final
#  norm), or the logits (rows, 1, vocab) of a step built with the final norm and head
NativeDecoderStep = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Sequence[tuple[torch.Tensor, torch.Tensor]], int],
    torch.Tensor,
]


def native_decoder_step(
    layers: Sequence[DecoderLayerParts],
    shape: DecoderStepShape,
    final_norm: nn.Module | None = None,
    lm_head: nn.Module | None = None,
) -> NativeDecoderStep | None:
    """A static step through all of ``layers`` in one native call, or None where none is available.

    The type of the first ``q_proj`` may provide it as a static
    ``native_decoder_step(layers, shape, final_norm, lm_head)`` (returning None where it cannot run
    these layers); plain ``nn.Linear`` layers have none. The step writes each layer's new key/value
    into its storage at ``position`` (the caller counts it with ``Cache.advance``) and returns the
    hidden states the decoder's final norm receives; given ``final_norm`` (an
    :class:`~microformers_sdk.layers.RMSNorm`) and ``lm_head``, it returns ``lm_head(final_norm(h))``
    instead, or is None where it cannot include them.
    """
    if (final_norm is None) != (lm_head is None):
        raise ValueError("native_decoder_step: give both final_norm and lm_head, or neither")
    if not layers:
        return None
    build = getattr(type(layers[0].q_proj), "native_decoder_step", None)
    return None if build is None else build(layers, shape, final_norm, lm_head)

"""Attention masks and position ids from a ``(batch, past + new)`` padding mask.

The conventions are the reference implementation's: ``attention_mask`` has 1 for real tokens and 0
for padding and covers the cached tokens plus the new ones; queries sit at cache positions
``past_length .. past_length + query_length - 1``; with left padding, position ids count real
tokens only (``cumsum - 1``, padding set to 1).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from microformers.errors import GenerationError

AttentionMask = tuple[torch.Tensor | None, bool]


def capturing_graph() -> bool:
    """Whether ``torch.jit.trace``, ``torch.export`` or ``torch.compile`` is recording the forward right now.

    Code must not branch on tensor values then (an all-ones mask dropped, ids range-checked): a trace would
    keep the example's branch for every later input, and ``torch.compile`` would break the graph there.
    It takes the general path instead.
    """
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


def exporting_graph() -> bool:
    """Whether ``torch.jit.trace`` or ``torch.export`` is recording a graph to be replayed on other sizes, unguarded.

    Choices made on the example's sizes (a product picked by the row count, a sliding window out of reach) are
    not taken then. (``torch.compile`` guards on sizes and recompiles, so it is not exporting in this sense.)
    """
    return torch.jit.is_tracing() or torch.compiler.is_exporting()


def _check_mask_length(attention_mask: torch.Tensor, needed: int, past_length: int, query_length: int) -> None:
    if attention_mask.shape[-1] < needed:
        raise GenerationError(
            f"attention_mask has {attention_mask.shape[-1]} columns but must cover the {past_length} cached and "
            f"{query_length} new tokens ({needed}); pass the mask for the whole sequence so far"
        )


def position_ids_from_attention_mask(
    attention_mask: torch.Tensor | None,
    past_length: int,
    query_length: int,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Position ids ``(batch, query_length)`` (or ``(1, query_length)`` without a mask) for the new tokens."""
    if attention_mask is None or attention_mask.dim() != 2:
        positions = torch.arange(past_length, past_length + query_length, device=device, dtype=torch.long)
        return positions.unsqueeze(0)
    total = past_length + query_length
    _check_mask_length(attention_mask, total, past_length, query_length)
    mask = attention_mask[:, :total]
    positions = mask.long().cumsum(-1) - 1
    positions = positions.masked_fill(mask == 0, 1)
    return positions[:, past_length:]


def build_attention_mask(
    attention_mask: torch.Tensor | None,
    query_length: int,
    past_length: int,
    *,
    sliding_window: int | None = None,
    causal: bool = True,
    device: torch.device | None = None,
) -> AttentionMask:
    """``(mask, is_causal)`` for the attention functions.

    ``mask`` is ``None`` where none is needed (no padding and no window in reach): then
    ``is_causal`` says whether the function must apply causality itself (a fresh prompt) or need
    not (one new token, which may see everything cached). Otherwise it is a boolean
    ``(batch or 1, 1, query_length, past_length + query_length)`` tensor, ``True`` where a query may
    attend. Keys within ``sliding_window`` positions of a query stay visible (``q - k < window``).
    Query rows that would see nothing (padding tokens under left padding) are allowed to see
    everything instead, so no softmax row is all ``-inf`` and no NaN can reach real tokens.
    A 4-D ``attention_mask`` is taken to be ready-made and is returned unchanged.
    """
    if attention_mask is not None and attention_mask.dim() == 4:
        return attention_mask, False
    kv_length = past_length + query_length
    if device is None and attention_mask is not None:
        device = attention_mask.device
    padding = None
    if attention_mask is not None:
        _check_mask_length(attention_mask, kv_length, past_length, query_length)
        padding = attention_mask[:, :kv_length]
        if not capturing_graph() and bool(padding.all()):  # recorded graphs keep the mask: no data branch
            padding = None
    # (a recorded graph applies the window whatever the example's length: it may be replayed on longer inputs)
    window_in_reach = sliding_window is not None and causal and (exporting_graph() or kv_length > sliding_window)
    if padding is None and not window_in_reach and not (causal and torch.jit.is_tracing()):
        # (a trace replays at other lengths: a causal mask is built from the sizes rather than a flag chosen by them)
        if not causal or query_length == 1:
            return None, False
        if past_length == 0:
            return None, True
    key_positions = torch.arange(kv_length, device=device)
    query_positions = torch.arange(past_length, kv_length, device=device)[:, None]
    if causal:
        allowed = key_positions <= query_positions
        if window_in_reach:
            allowed = allowed & (key_positions > query_positions - sliding_window)
    else:
        allowed = torch.ones(query_length, kv_length, dtype=torch.bool, device=device)
    allowed = allowed[None, None]
    if padding is not None:
        allowed = allowed & padding[:, None, None, :].bool()
        allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
    return allowed, False


def build_attention_masks(
    attention_mask: torch.Tensor | None,
    query_length: int,
    past_length: int,
    windows: Iterable[int | None],
    *,
    device: torch.device | None = None,
) -> dict[int | None, AttentionMask]:
    """One :func:`build_attention_mask` per distinct sliding window (``None``: full attention).

    Models whose layers mix windows (Gemma's alternating local/global layers, Qwen2's
    ``max_window_layers``) build the masks once per forward and look each layer's up by its window.
    """
    return {
        window: build_attention_mask(attention_mask, query_length, past_length, sliding_window=window, device=device)
        for window in dict.fromkeys(windows)
    }


def last_token_indices(
    input_ids: torch.Tensor | None, pad_token_id: int | None, batch: int, length: int, device: torch.device
) -> torch.Tensor:
    """Each row's last non-padding position (left or right padding alike), for heads that pool there.

    Without token ids or a pad id padding cannot be seen, and the last position is used.
    """
    if pad_token_id is None or input_ids is None:
        return torch.full((batch,), length - 1, device=device)
    positions = torch.arange(input_ids.shape[-1], device=device)
    return (positions * (input_ids != pad_token_id).to(device)).argmax(-1)

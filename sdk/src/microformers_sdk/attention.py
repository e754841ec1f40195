"""Attention functions with the kernel's attention-hook signature, and their lookup by name.

Every function takes ``query`` ``(batch, heads, q_len, head_dim)`` and ``key``/``value``
``(batch, kv_heads, kv_len, head_dim)`` (``heads`` a multiple of ``kv_heads``: grouped-query
attention), an ``attention_mask`` that is ``None``, a boolean tensor (``True`` = may attend) or an
additive float tensor broadcastable to ``(batch, heads, q_len, kv_len)``, and keyword-only
``scaling``, ``dropout`` and ``is_causal`` (only meaningful with no mask). It returns the output as
``(batch, heads, q_len, head_dim)``. Passing ``return_weights=True`` to :func:`eager_attention`
returns ``(output, weights)`` instead, which is how models implement ``output_attentions``.

Models resolve ``config._attn_implementation`` (default ``"sdpa"``) with
:func:`get_attention_function`, which asks the kernel registry, so a plugin can add its own
implementation through ``register_attention_implementations``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from . import native

AttentionFunction = Callable[..., Any]

DEFAULT_ATTENTION = "sdpa"


def _sdpa_supports_gqa() -> bool:
    probe = torch.zeros(1, 2, 1, 2)
    try:
        F.scaled_dot_product_attention(probe, probe[:, :1], probe[:, :1], enable_gqa=True)
    except TypeError:  # torch < 2.5
        return False
    return True


_SDPA_HAS_GQA = _sdpa_supports_gqa()


def sdpa_shares_kv_heads() -> bool:
    """Whether this torch's SDPA takes fewer key/value heads than query heads itself (``enable_gqa``, torch >= 2.5);
    else :func:`sdpa_attention` repeats them first."""
    return _SDPA_HAS_GQA


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``(batch, kv_heads, seq, dim) -> (batch, kv_heads * n_rep, seq, dim)``, each head repeated in place."""
    if n_rep == 1:
        return hidden_states
    batch, kv_heads, seq_len, head_dim = hidden_states.shape
    expanded = hidden_states[:, :, None].expand(batch, kv_heads, n_rep, seq_len, head_dim)
    return expanded.reshape(batch, kv_heads * n_rep, seq_len, head_dim)


def soft_cap(scores: torch.Tensor, cap: float | None) -> torch.Tensor:
    """``cap * tanh(scores / cap)``: squashes scores into ``(-cap, cap)`` (Gemma 2); ``cap=None`` is a no-op."""
    if cap is None:
        return scores
    return torch.tanh(scores / cap) * cap


def _group_size(query: torch.Tensor, key: torch.Tensor) -> int:
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads == 0:  # every head of the layer pruned: nothing to group
        return 1
    if heads % kv_heads:
        raise ValueError(f"query has {heads} heads, which is not a multiple of the {kv_heads} key/value heads")
    return heads // kv_heads


# torch's CPU flash-attention kernel takes keys in blocks of 512 and, below 768 queries, queries in blocks of
# 64 or 128; a causal block computes its queries against every key of the block and masks the later ones, so a
# 512-token prompt computes all 512 x 512 scores where 136 x 512 are needed. Chunks of 64 queries, each
# with the keys up to its own last one and an explicit (additive) causal mask, skip the blocks above the diagonal:
# 5.6 against 7.9 ms a layer for SmolLM2 at 512 tokens on one Zen 4 core. From 768 queries the kernel's query
# blocks are 256 and the chunks gain less (1.1x at 768-1,200 tokens), nothing from 1,280 (2,048: 1.07x slower).
# (Where the SDK's native causal attention runs, below, it takes these prompts instead.)
CAUSAL_CHUNK = 64
_CAUSAL_CHUNKED_RANGE = (192, 1280)


def _chunks_causal(query: torch.Tensor, key: torch.Tensor, dropout: float, is_causal: bool) -> bool:
    q_len = query.shape[2]
    return (
        is_causal
        and dropout == 0.0
        and query.device.type == "cpu"
        and _CAUSAL_CHUNKED_RANGE[0] <= q_len < _CAUSAL_CHUNKED_RANGE[1]
        and key.shape[2] == q_len
        and not torch.compiler.is_compiling()
    )


# From this many tokens a square causal prompt takes the SDK's native attention where it runs (a CPU with AVX-512):
# SmolLM2's layers at 100 tokens 0.3 against 0.5 ms, at 512 5.0 against 7.5 (the chunks above), at 2,048 66
# against 87 (torch's kernel) on one Zen 4 core. Below, a call costs more than it saves.
NATIVE_CAUSAL_FROM = 32


def _native_causal(query: torch.Tensor, key: torch.Tensor, dropout: float, is_causal: bool) -> bool:
    return (
        is_causal
        and dropout == 0.0
        and query.shape[2] >= NATIVE_CAUSAL_FROM
        and key.shape[2] == query.shape[2]
        and native.eager_cpu_inference(query)
    )


def _causal_sdpa_in_chunks(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None, extra: dict[str, Any]
) -> torch.Tensor:
    """Causal ``scaled_dot_product_attention`` over square ``query``/``key`` as chunks of ``CAUSAL_CHUNK`` queries."""
    q_len = query.shape[2]
    # additive (0 and -inf above the diagonal): SDPA turns a boolean mask into this form on every call
    visible = torch.full((q_len, q_len), -math.inf, dtype=query.dtype, device=query.device).triu_(1)
    out = query.new_empty(*query.shape[:3], value.shape[3])
    for start in range(0, q_len, CAUSAL_CHUNK):
        end = min(start + CAUSAL_CHUNK, q_len)
        out[:, :, start:end] = F.scaled_dot_product_attention(
            query[:, :, start:end], key[:, :, :end], value[:, :, :end], attn_mask=visible[start:end, :end],
            scale=scaling, **extra,
        )  # fmt: skip
    return out


def sdpa_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    is_causal: bool = False,
    **kwargs: Any,
) -> torch.Tensor:
    """Attention through ``torch.nn.functional.scaled_dot_product_attention``.

    ``softcap=`` (attention-logit soft-capping) cannot be expressed in SDPA: such calls run :func:`eager_attention`.
    """
    if kwargs.get("softcap") is not None:
        return eager_attention(
            query, key, value, attention_mask, scaling=scaling, dropout=dropout, is_causal=is_causal,
            softcap=kwargs["softcap"],
        )  # fmt: skip
    n_rep = _group_size(query, key)
    extra: dict[str, Any] = {}
    if n_rep > 1:
        if _SDPA_HAS_GQA:
            # Shares each key/value head across its query group without copying the cache per step.
            extra["enable_gqa"] = True
        else:
            key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    if attention_mask is None and _native_causal(query, key, dropout, is_causal):
        out = native.causal_attention(query, key, value, query.shape[-1] ** -0.5 if scaling is None else scaling)
        if out is not None:
            return out
    if attention_mask is None and _chunks_causal(query, key, dropout, is_causal):
        return _causal_sdpa_in_chunks(query, key, value, scaling, extra)
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        is_causal=is_causal and attention_mask is None and query.shape[2] > 1,
        scale=scaling,
        **extra,
    )


def eager_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    is_causal: bool = False,
    return_weights: bool = False,
    softcap: float | None = None,
    **kwargs: Any,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention written out with matmul and softmax (float32 softmax); can return the weights.

    ``softcap`` soft-caps the scaled scores (``cap * tanh(scores / cap)``) before the mask is applied.
    """
    n_rep = _group_size(query, key)
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    scores = soft_cap(torch.matmul(query, key.transpose(2, 3)) * scaling, softcap)
    q_len, kv_len = scores.shape[-2], scores.shape[-1]
    if attention_mask is None and is_causal and q_len > 1:
        attention_mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    if dropout > 0.0:
        weights = F.dropout(weights, p=dropout)  # callers pass dropout=0.0 outside training
    output = torch.matmul(weights, value)
    return (output, weights) if return_weights else output


_BUILTIN: dict[str, AttentionFunction] = {"sdpa": sdpa_attention, "eager": eager_attention}
# name -> the function the registry gave last (an eager forward looks it up; a compiled one reuses it)
_RESOLVED: dict[str, AttentionFunction] = {}


def attention_implementation_name(config: Any) -> str:
    """``config._attn_implementation`` (or ``attn_implementation``), ``"sdpa"`` when unset."""
    name = getattr(config, "_attn_implementation", None) or getattr(config, "attn_implementation", None)
    return name or DEFAULT_ATTENTION


def get_attention_function(config_or_name: Any) -> AttentionFunction:
    """The attention function registered under the config's ``attn_implementation``.

    Unknown names raise the registry's error, which lists what is installed and which plugin to get.
    """
    name = config_or_name if isinstance(config_or_name, str) else attention_implementation_name(config_or_name)
    if torch.compiler.is_compiling() and name in _RESOLVED:  # the registry's lock cannot be compiled: the last answer
        return _RESOLVED[name]
    from microformers.plugins import registry

    registration = registry.get("attention", name)
    if registration is not None:
        function = registration.load()
    elif name in _BUILTIN:  # this SDK is importable but its entry point is not installed
        function = _BUILTIN[name]
    else:
        function = registry.require("attention", name, what="attention implementation")
    _RESOLVED[name] = function
    return function

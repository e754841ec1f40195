"""T5 (v1.0, v1.1 / Flan-T5), mT5 and UMT5 encoder-decoders, written out top to bottom.

Reading order: the RMS layer norm, the two feed-forward blocks (ReLU ``wi``/``wo``; gated ``wi_0``/``wi_1``/``wo``),
relative position buckets, attention (``q``/``k``/``v``/``o``, no bias, no ``1/sqrt(d)`` scaling, a learned
relative position bias), the self-attention / cross-attention / feed-forward sub-layers, the block, the stack
(encoder or decoder), the pre-trained base class, then ``T5Model``, ``T5ForConditionalGeneration``,
``T5EncoderModel`` and the classification, token classification and question answering heads. The
configurations (torch-free, for a cheap ``AutoConfig``) are in ``configuration_t5.py``.

Parameter names equal the reference's checkpoint tensor names (``shared.weight``,
``encoder.block.{i}.layer.0.SelfAttention.q.weight``, ``encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight``,
``encoder.block.{i}.layer.1.DenseReluDense.wi.weight`` / ``wi_0`` / ``wi_1`` / ``wo``,
``decoder.block.{i}.layer.1.EncDecAttention.k.weight``, ``encoder.final_layer_norm.weight``, ``lm_head.weight``).
``encoder.embed_tokens`` and ``decoder.embed_tokens`` are the ``shared`` module itself, so files hold
``shared.weight`` only; ``lm_head`` is ``shared`` when ``tie_word_embeddings`` (T5 v1.0), its own matrix otherwise.

Position information is only the relative bias: the first self-attention layer of each stack owns the bias
table (bidirectional buckets in the encoder, causal ones in the decoder) and the later layers reuse the bias it
computed (UMT5: every layer owns a table). Cached decoding places the new queries after the cached positions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import ConfigError, InputError
from microformers.logging import get_logger
from microformers.outputs import ModelOutput
from microformers_sdk.attention import AttentionFunction, eager_attention, get_attention_function
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import sequence_classification_loss, span_loss, token_cross_entropy
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqQuestionAnsweringModelOutput,
    Seq2SeqSequenceClassifierOutput,
    TokenClassifierOutput,
)
from microformers_sdk.seq2seq import (
    EncoderDecoderCache,
    Seq2SeqLMMixin,
    as_encoder_decoder_cache,
    as_encoder_output,
    check_decoder_inputs,
    shift_tokens_right,
)

from .configuration_t5 import MT5Config, T5Config, UMT5Config

__all__ = [
    "MT5Config",
    "MT5EncoderModel",
    "MT5ForConditionalGeneration",
    "MT5ForQuestionAnswering",
    "MT5ForSequenceClassification",
    "MT5ForTokenClassification",
    "MT5Model",
    "T5Config",
    "T5EncoderModel",
    "T5ForConditionalGeneration",
    "T5ForQuestionAnswering",
    "T5ForSequenceClassification",
    "T5ForTokenClassification",
    "T5InputError",
    "T5Model",
    "T5PreTrainedModel",
    "UMT5Config",
    "UMT5EncoderModel",
    "UMT5ForConditionalGeneration",
    "UMT5ForQuestionAnswering",
    "UMT5ForSequenceClassification",
    "UMT5ForTokenClassification",
    "UMT5Model",
]

logger = get_logger(__name__)

# What a block returns: hidden states, the self- and cross-attention biases it used (shared with later blocks),
# and, with output_attentions, its self- and cross-attention probabilities.
BlockOutput = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


class T5InputError(InputError):
    """The arguments of a forward call do not fit the model (missing inputs, mismatched shapes)."""


def _clamp_half(hidden_states: torch.Tensor) -> torch.Tensor:
    # float16 activations of large T5 checkpoints overflow; the reference clamps after every sub-layer.
    if hidden_states.dtype != torch.float16:
        return hidden_states
    big = torch.finfo(torch.float16).max
    limit = torch.where(torch.isinf(hidden_states).any(), big - 1000, big)
    return torch.clamp(hidden_states, min=-limit, max=limit)


# -- norm and feed-forward -----------------------------------------------------------------------------
class T5LayerNorm(nn.Module):
    """RMS norm: ``weight * x / sqrt(mean(x**2) + eps)``, no mean subtraction and no bias; variance in float32."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class T5DenseActDense(nn.Module):
    """``wo(dropout(act(wi(x))))``: T5 v1.0's ReLU feed-forward."""

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.wi = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = get_activation(config.dense_act_fn, "feed_forward_proj")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.wo(self.dropout(self.act(self.wi(hidden_states))))


class T5DenseGatedActDense(nn.Module):
    """``wo(dropout(act(wi_0(x)) * wi_1(x)))``: the gated feed-forward of T5 v1.1, Flan-T5 and mT5."""

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.wi_0 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wi_1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = get_activation(config.dense_act_fn, "feed_forward_proj")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gated = self.act(self.wi_0(hidden_states)) * self.wi_1(hidden_states)
        return self.wo(self.dropout(gated))


class T5LayerFF(nn.Module):
    """Pre-norm residual feed-forward: ``x + dropout(DenseReluDense(layer_norm(x)))``."""

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.DenseReluDense = T5DenseGatedActDense(config) if config.is_gated_act else T5DenseActDense(config)
        self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states + self.dropout(self.DenseReluDense(self.layer_norm(hidden_states)))


# -- attention -----------------------------------------------------------------------------------------
def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """Bucket of each ``key_position - query_position`` (Mesh TensorFlow's scheme).

    Bidirectional: half the buckets for keys after the query, half for keys before; causal: only keys before
    (later ones share bucket 0). Within a half, the first ``n/2`` distances get a bucket each, larger ones
    share logarithmically wider buckets up to ``max_distance``; farther keys fall in the last bucket.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).to(torch.long) * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).to(torch.long)
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


def merge_bias_and_mask(bias: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor | None:
    """One tensor for the attention function: the bias where the mask allows, the dtype's minimum elsewhere."""
    if bias is None or mask is None:
        return mask if bias is None else bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, torch.finfo(bias.dtype).min)
    return bias + mask.to(bias.dtype)


class T5Attention(nn.Module):
    """Multi-head attention with ``q``, ``k``, ``v``, ``o`` projections (``num_heads * d_kv`` inner size, no bias).

    Scores are the raw ``q . k`` (T5 folds the ``1/sqrt(d)`` into its initialisation) plus the position bias.
    With ``has_relative_attention_bias`` the layer owns ``relative_attention_bias`` (one learned scalar per
    bucket and head) and computes the bias for its stack; otherwise it takes the bias handed to it. As
    cross-attention (``key_value_states`` given) the keys and values come from the encoder output, computed
    once per prompt through the cache.
    """

    def __init__(
        self, config: T5Config, has_relative_attention_bias: bool, is_decoder: bool, layer_idx: int
    ) -> None:
        super().__init__()
        self.is_decoder = is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = config.relative_attention_num_buckets
        self.relative_attention_max_distance = config.relative_attention_max_distance
        self.n_heads = config.num_heads
        self.key_value_proj_dim = config.d_kv
        self.inner_dim = config.num_heads * config.d_kv
        self.dropout = float(config.dropout_rate or 0.0)
        self.layer_idx = layer_idx
        self.q = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, config.d_model, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)

    def compute_bias(self, query_length: int, key_length: int, past_length: int, device: torch.device) -> torch.Tensor:
        """``(1, heads, query_length, key_length)`` bias for queries at ``past_length ..`` and keys at ``0 ..``."""
        query_positions = torch.arange(query_length, dtype=torch.long, device=device)[:, None] + past_length
        key_positions = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        buckets = relative_position_bucket(
            key_positions - query_positions,
            bidirectional=not self.is_decoder,
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance,
        )
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)

    def _heads(self, states: torch.Tensor, projection: nn.Linear) -> torch.Tensor:
        batch, length, _ = states.shape
        return projection(states).view(batch, length, -1, self.key_value_proj_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        mask: torch.Tensor | None,
        position_bias: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        key_value_states: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        past_length: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Returns the projected output, the bias-with-mask it used (for the next layers) and the probabilities.

        ``mask`` (boolean, ``True`` = may attend) is folded into ``position_bias`` when this layer computes it;
        a ``position_bias`` handed in already carries it.
        """
        batch, length, _ = hidden_states.shape
        query = self._heads(hidden_states, self.q)
        if key_value_states is not None:

            def encoder_keys_values() -> tuple[torch.Tensor, torch.Tensor]:
                return self._heads(key_value_states, self.k), self._heads(key_value_states, self.v)

            if cache is not None:
                key, value = cache.cross_attention_states(self.layer_idx, encoder_keys_values)
            else:
                key, value = encoder_keys_values()
        else:
            key, value = self._heads(hidden_states, self.k), self._heads(hidden_states, self.v)
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)

        if position_bias is None:
            bias = None
            if self.has_relative_attention_bias:
                bias = self.compute_bias(length, key.shape[-2], past_length, query.device).to(query.dtype)
            position_bias = merge_bias_and_mask(bias, mask)

        dropout = self.dropout if self.training else 0.0
        weights = None
        if output_attentions:  # only the eager kernel hands back the probabilities
            context, weights = eager_attention(
                query, key, value, position_bias, scaling=1.0, dropout=dropout, return_weights=True
            )
        else:
            context = attention_fn(query, key, value, position_bias, scaling=1.0, dropout=dropout)
        context = context.transpose(1, 2).reshape(batch, length, self.inner_dim)
        return self.o(context), position_bias, weights


class T5LayerSelfAttention(nn.Module):
    """Pre-norm residual self-attention: ``x + dropout(SelfAttention(layer_norm(x)))``."""

    def __init__(self, config: T5Config, has_relative_attention_bias: bool, is_decoder: bool, layer_idx: int) -> None:
        super().__init__()
        self.SelfAttention = T5Attention(config, has_relative_attention_bias, is_decoder, layer_idx)
        self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(
        self,
        hidden_states: torch.Tensor,
        mask: torch.Tensor | None,
        position_bias: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        cache: EncoderDecoderCache | None,
        past_length: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        attended, position_bias, weights = self.SelfAttention(
            self.layer_norm(hidden_states), mask, position_bias, attention_fn, output_attentions,
            cache=cache, past_length=past_length,
        )  # fmt: skip
        return hidden_states + self.dropout(attended), position_bias, weights


class T5LayerCrossAttention(nn.Module):
    """Pre-norm residual attention over the encoder output: ``x + dropout(EncDecAttention(layer_norm(x), enc))``."""

    def __init__(self, config: T5Config, layer_idx: int) -> None:
        super().__init__()
        self.EncDecAttention = T5Attention(config, has_relative_attention_bias=False, is_decoder=True,
                                           layer_idx=layer_idx)  # fmt: skip
        self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        mask: torch.Tensor | None,
        position_bias: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        cache: EncoderDecoderCache | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        attended, position_bias, weights = self.EncDecAttention(
            self.layer_norm(hidden_states), mask, position_bias, attention_fn, output_attentions,
            key_value_states=encoder_hidden_states, cache=cache,
        )  # fmt: skip
        return hidden_states + self.dropout(attended), position_bias, weights


# -- block and stack -----------------------------------------------------------------------------------
class T5Block(nn.Module):
    """``layer[0]`` self-attention, ``layer[1]`` cross-attention (decoder only), ``layer[-1]`` feed-forward."""

    def __init__(self, config: T5Config, has_relative_attention_bias: bool, is_decoder: bool, layer_idx: int) -> None:
        super().__init__()
        self.is_decoder = is_decoder
        self.layer = nn.ModuleList([T5LayerSelfAttention(config, has_relative_attention_bias, is_decoder, layer_idx)])
        if is_decoder:
            self.layer.append(T5LayerCrossAttention(config, layer_idx))
        self.layer.append(T5LayerFF(config))

    def forward(
        self,
        hidden_states: torch.Tensor,
        mask: torch.Tensor | None,
        position_bias: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor | None,
        encoder_mask: torch.Tensor | None,
        encoder_decoder_position_bias: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        cache: EncoderDecoderCache | None,
        past_length: int,
    ) -> BlockOutput:
        hidden_states, position_bias, self_weights = self.layer[0](
            hidden_states, mask, position_bias, attention_fn, output_attentions, cache, past_length
        )
        hidden_states = _clamp_half(hidden_states)
        cross_weights = None
        if self.is_decoder and encoder_hidden_states is not None:
            hidden_states, encoder_decoder_position_bias, cross_weights = self.layer[1](
                hidden_states, encoder_hidden_states, encoder_mask, encoder_decoder_position_bias, attention_fn,
                output_attentions, cache,
            )  # fmt: skip
            hidden_states = _clamp_half(hidden_states)
        hidden_states = _clamp_half(self.layer[-1](hidden_states))
        return hidden_states, position_bias, encoder_decoder_position_bias, self_weights, cross_weights


def _encoder_padding_mask(
    attention_mask: torch.Tensor | None, encoder_length: int, device: torch.device
) -> torch.Tensor | None:
    """``(batch, 1, 1, encoder_length)``, ``True`` at real encoder tokens; ``None`` when nothing is padded."""
    if attention_mask is None or attention_mask.dim() == 4:
        return attention_mask
    if attention_mask.shape[-1] != encoder_length:
        raise T5InputError(
            f"attention_mask has {attention_mask.shape[-1]} columns but the encoder output has {encoder_length} "
            "positions; pass the mask of the encoder's input_ids"
        )
    if not torch.compiler.is_exporting() and bool(attention_mask.all()):  # exported graphs keep the mask
        return None
    return attention_mask[:, None, None, :].to(device=device, dtype=torch.bool)


def _call(layer: nn.Module, *args: Any) -> Any:
    return layer(*args)


class T5Stack(nn.Module):
    """The encoder (bidirectional) or the decoder (causal, cross-attending): ``block``, ``final_layer_norm``.

    ``embed_tokens`` is the model's ``shared`` embedding. The encoder has ``num_layers`` blocks, the decoder
    ``num_decoder_layers``. Called alone (``model.get_encoder()(input_ids=..., attention_mask=...)``) it
    returns ``BaseModelOutputWithPastAndCrossAttentions``.
    """

    def __init__(self, config: T5Config, embed_tokens: nn.Embedding, is_decoder: bool) -> None:
        super().__init__()
        self.config = config
        self.is_decoder = is_decoder
        self.embed_tokens = embed_tokens
        depth = config.num_decoder_layers if is_decoder else config.num_layers
        per_layer = config.relative_attention_per_layer
        self.block = nn.ModuleList(
            T5Block(config, has_relative_attention_bias=per_layer or i == 0, is_decoder=is_decoder, layer_idx=i)
            for i in range(depth)
        )
        self.final_layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def _self_attention_mask(
        self, attention_mask: torch.Tensor | None, length: int, past_length: int, device: torch.device
    ) -> torch.Tensor | None:
        if attention_mask is not None and attention_mask.dim() == 2 and not self.is_decoder:
            if attention_mask.shape[-1] != length:
                raise T5InputError(
                    f"attention_mask has {attention_mask.shape[-1]} columns but the input has {length} tokens; "
                    "pass the mask the tokenizer returned with these input_ids"
                )
        mask, is_causal = build_attention_mask(
            attention_mask, length, past_length, causal=self.is_decoder, device=device
        )
        if mask is None and is_causal:  # the bias is added to every score, so causality must be a mask too
            mask = torch.ones(length, past_length + length, dtype=torch.bool, device=device).tril(past_length)
            mask = mask[None, None]
        return mask

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        call_layer: Callable[..., Any] = _call,
        **kwargs: Any,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple[Any, ...]:
        """``call_layer(block, *args)`` runs one block; the model passes its own so gradient checkpointing applies."""
        config = self.config
        which = "decoder" if self.is_decoder else "encoder"
        if (input_ids is None) == (inputs_embeds is None):
            prefix = "decoder_" if self.is_decoder else ""
            raise T5InputError(
                f"the T5 {which} needs exactly one of {prefix}input_ids or {prefix}inputs_embeds"
                + (" (or labels, shifted right into decoder_input_ids)" if self.is_decoder else "")
            )
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = config.return_dict if return_dict is None else return_dict
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        length = inputs_embeds.shape[1]

        cache = None
        if self.is_decoder:
            use_cache = config.use_cache if use_cache is None else use_cache
            cache = as_encoder_decoder_cache(past_key_values)
            if cache is None and use_cache:
                cache = EncoderDecoderCache()
        elif use_cache:
            raise T5InputError("use_cache=True is for the decoder; the T5 encoder keeps no cache")
        past_length = cache.get_seq_length() if cache is not None else 0

        device = inputs_embeds.device
        mask = self._self_attention_mask(attention_mask, length, past_length, device)
        encoder_mask = None
        if self.is_decoder and encoder_hidden_states is not None:
            encoder_mask = _encoder_padding_mask(encoder_attention_mask, encoder_hidden_states.shape[1], device)
        attention_fn = get_attention_function(config)

        hidden_states = self.dropout(inputs_embeds)
        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor | None] = []
        all_cross_attentions: list[torch.Tensor | None] = []
        position_bias = None
        encoder_decoder_position_bias = None
        for block in self.block:
            all_hidden_states.append(hidden_states)
            hidden_states, position_bias, encoder_decoder_position_bias, weights, cross_weights = call_layer(
                block, hidden_states, mask, position_bias, encoder_hidden_states, encoder_mask,
                encoder_decoder_position_bias, attention_fn, output_attentions, cache, past_length,
            )  # fmt: skip
            if config.relative_attention_per_layer:
                position_bias = None
            all_attentions.append(weights)
            all_cross_attentions.append(cross_weights)
        hidden_states = self.dropout(self.final_layer_norm(hidden_states))
        # As the reference reports them: each block's input, then the normed final state (not the last block's output).
        all_hidden_states.append(hidden_states)

        output = BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            past_key_values=cache if self.is_decoder and use_cache else None,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
            cross_attentions=(
                tuple(all_cross_attentions)
                if output_attentions and self.is_decoder and encoder_hidden_states is not None
                else None
            ),
        )
        return output if return_dict else output.to_tuple()


# -- pre-trained base class ----------------------------------------------------------------------------
_BLOCK_KEY = re.compile(r"(?:^|\.)(encoder|decoder)\.block\.(\d+)\.")


class T5PreTrainedModel(PreTrainedModel):
    """Weight init (the reference's scheme), embedding sharing, checkpoint checks shared by every T5 class."""

    config_class = T5Config
    base_model_prefix = "transformer"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["T5Block"]
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "shared.weight"}
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        # Old exports saved the shared embedding under the stacks' names too; a tied lm_head equal to it.
        r"(^|\.)(encoder|decoder)\.embed_tokens\.weight$",
        r"^lm_head\.weight$",
        r"decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight$",
    ]
    config: T5Config

    # -- weights ---------------------------------------------------------------------------------
    def _init_weights(self, module: nn.Module) -> None:
        factor = self.config.initializer_factor
        d_model, d_kv, d_ff = self.config.d_model, self.config.d_kv, self.config.d_ff
        if isinstance(module, T5LayerNorm):
            nn.init.constant_(module.weight, factor)
        elif isinstance(module, nn.Embedding):
            # shared; a relative_attention_bias table is redrawn by its T5Attention, visited after its children
            nn.init.normal_(module.weight, mean=0.0, std=factor)
        elif isinstance(module, T5DenseActDense):
            nn.init.normal_(module.wi.weight, mean=0.0, std=factor * d_model**-0.5)
            nn.init.normal_(module.wo.weight, mean=0.0, std=factor * d_ff**-0.5)
        elif isinstance(module, T5DenseGatedActDense):
            nn.init.normal_(module.wi_0.weight, mean=0.0, std=factor * d_model**-0.5)
            nn.init.normal_(module.wi_1.weight, mean=0.0, std=factor * d_model**-0.5)
            nn.init.normal_(module.wo.weight, mean=0.0, std=factor * d_ff**-0.5)
        elif isinstance(module, T5Attention):
            inner = module.inner_dim
            nn.init.normal_(module.q.weight, mean=0.0, std=factor * (d_model * d_kv) ** -0.5)
            nn.init.normal_(module.k.weight, mean=0.0, std=factor * d_model**-0.5)
            nn.init.normal_(module.v.weight, mean=0.0, std=factor * d_model**-0.5)
            nn.init.normal_(module.o.weight, mean=0.0, std=factor * inner**-0.5)
            if module.has_relative_attention_bias:
                nn.init.normal_(module.relative_attention_bias.weight, mean=0.0, std=factor * d_model**-0.5)
        elif isinstance(module, T5ClassificationHead):
            for linear in (module.dense, module.out_proj):
                nn.init.normal_(linear.weight, mean=0.0, std=factor * d_model**-0.5)
                nn.init.zeros_(linear.bias)
        elif isinstance(module, nn.Linear) and module.weight.shape[-1] == d_model:
            # lm_head, classifier, qa_outputs (the reference draws the untied lm_head with std factor)
            std = factor if module.weight.shape[0] == self.config.vocab_size else factor * d_model**-0.5
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def tied_parameter_names(self) -> set[str]:
        """The stacks' ``embed_tokens`` always (they are ``shared``); ``lm_head`` with ``tie_word_embeddings``."""
        names = {
            f"{name}.embed_tokens.weight" for name, module in self.named_modules() if isinstance(module, T5Stack)
        }
        if getattr(self.config, "tie_word_embeddings", False) and isinstance(getattr(self, "lm_head", None), nn.Linear):
            names.add("lm_head.weight")
        return names

    def tie_weights(self) -> None:
        shared = getattr(self, "shared", None)
        if shared is None:
            return
        for stack in (getattr(self, "encoder", None), getattr(self, "decoder", None)):
            if isinstance(stack, T5Stack):
                stack.embed_tokens = shared
        if self.config.tie_word_embeddings and isinstance(getattr(self, "lm_head", None), nn.Linear):
            self.lm_head.weight = shared.weight

    # -- loading ---------------------------------------------------------------------------------
    def _check_stack_depths(self, checkpoint_keys: set[str], where: Path) -> None:
        """A config whose ``num_layers`` / ``num_decoder_layers`` disagrees with the file's blocks is an error."""
        found: dict[str, int] = {}
        for key in checkpoint_keys:
            match = _BLOCK_KEY.search(key)
            if match:
                found[match[1]] = max(found.get(match[1], 0), int(match[2]) + 1)
        for module in self.modules():
            if not isinstance(module, T5Stack):
                continue
            which = "decoder" if module.is_decoder else "encoder"
            setting = "num_decoder_layers" if module.is_decoder else "num_layers"
            stored = found.get(which, 0)
            if stored and stored != len(module.block):
                raise ConfigError(
                    f"{setting}={len(module.block)} in the config, but the checkpoint {where} holds {stored} "
                    f"{which} blocks; set {setting} to {stored} in config.json (the {which} depth must match the weights)"
                )

    def _materialise(
        self, source: Mapping[str, torch.Tensor], dtype: torch.dtype, ignore_mismatched_sizes: bool, strict: bool,
        files: list[Path], placement: Callable[[str], torch.device | None] | None = None,
    ) -> dict[str, list[Any]]:  # fmt: skip
        keys = set(source.keys())
        self._check_stack_depths(keys, files[0] if len(files) == 1 else files[0].parent)
        if (
            self.config.tie_word_embeddings
            and isinstance(getattr(self, "lm_head", None), nn.Linear)
            and {"lm_head.weight", "shared.weight"} <= keys
            and not torch.equal(source["lm_head.weight"], source["shared.weight"])
        ):
            # As the reference: a file whose lm_head differs from the embedding keeps it, whatever the config says.
            logger.warning(
                "config says tie_word_embeddings=true but lm_head.weight differs from shared.weight in the "
                "checkpoint: keeping the checkpoint's lm_head (set tie_word_embeddings=false to silence this)"
            )
            self.config.tie_word_embeddings = False
            self.lm_head.weight = nn.Parameter(torch.empty_like(self.lm_head.weight, device="meta"))
        return super()._materialise(source, dtype, ignore_mismatched_sizes, strict, files, placement)

    # -- helpers ---------------------------------------------------------------------------------
    def _shift_right(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids`` moved one position right after ``decoder_start_token_id`` (labels -> decoder inputs)."""
        return shift_tokens_right(input_ids, self.config.pad_token_id, self.config.decoder_start_token_id)

    def _returned(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


class _EncoderDecoder(T5PreTrainedModel):
    """``shared`` embedding, ``encoder`` and ``decoder`` stacks: what every encoder-decoder class holds."""

    def _build_stacks(self, config: T5Config) -> None:
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = T5Stack(config, self.shared, is_decoder=False)
        self.decoder = T5Stack(config, self.shared, is_decoder=True)

    def get_input_embeddings(self) -> nn.Module:
        return self.shared

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.shared = value
        self.encoder.set_input_embeddings(value)
        self.decoder.set_input_embeddings(value)

    def get_encoder(self) -> T5Stack:
        return self.encoder

    def get_decoder(self) -> T5Stack:
        return self.decoder

    def _encode_decode(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        decoder_input_ids: torch.Tensor | None,
        decoder_attention_mask: torch.Tensor | None,
        encoder_outputs: Any,
        past_key_values: Any,
        inputs_embeds: torch.Tensor | None,
        decoder_inputs_embeds: torch.Tensor | None,
        use_cache: bool | None,
        output_attentions: bool | None,
        output_hidden_states: bool | None,
    ) -> tuple[Any, BaseModelOutputWithPastAndCrossAttentions]:
        """The encoder's output (given or computed) and the decoder's."""
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
                call_layer=self._call_layer,
            )  # fmt: skip
        else:
            encoder_outputs = as_encoder_output(encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids, attention_mask=decoder_attention_mask, inputs_embeds=decoder_inputs_embeds,
            encoder_hidden_states=encoder_outputs.last_hidden_state, encoder_attention_mask=attention_mask,
            past_key_values=past_key_values, use_cache=use_cache, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True, call_layer=self._call_layer,
        )  # fmt: skip
        return encoder_outputs, decoder_outputs


def _seq2seq_fields(encoded: Any, decoded: BaseModelOutputWithPastAndCrossAttentions) -> dict[str, Any]:
    return {
        "past_key_values": decoded.past_key_values,
        "decoder_hidden_states": decoded.hidden_states,
        "decoder_attentions": decoded.attentions,
        "cross_attentions": decoded.cross_attentions,
        "encoder_last_hidden_state": encoded.last_hidden_state,
        "encoder_hidden_states": getattr(encoded, "hidden_states", None),
        "encoder_attentions": getattr(encoded, "attentions", None),
    }


# -- base model ----------------------------------------------------------------------------------------
# T5Model.forward and T5ForConditionalGeneration.forward take the parameters of the BART classes'
# (microformers-bart), kept in sync by tests/integration/test_model_copies_in_sync.py.
class T5Model(_EncoderDecoder):
    """Encoder and decoder without a head; ``last_hidden_state`` is the decoder's final (normed) state.

    The caller supplies ``decoder_input_ids`` (``model._shift_right(target_ids)`` for teacher forcing).
    """

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self._build_stacks(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache_position: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Seq2SeqModelOutput | tuple[Any, ...]:
        encoded, decoded = self._encode_decode(
            input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs, past_key_values,
            inputs_embeds, decoder_inputs_embeds, use_cache, output_attentions, output_hidden_states,
        )  # fmt: skip
        output = Seq2SeqModelOutput(last_hidden_state=decoded.last_hidden_state, **_seq2seq_fields(encoded, decoded))
        return self._returned(output, return_dict)


# -- heads ---------------------------------------------------------------------------------------------
class T5ForConditionalGeneration(Seq2SeqLMMixin, _EncoderDecoder):
    """Encoder, decoder and ``lm_head``: translation, summarisation, span corruption, instruction following.

    ``labels`` (``-100`` ignored) give the mean token cross entropy and, without ``decoder_input_ids``, are
    shifted right into them. With ``config.scale_decoder_outputs`` (T5 v1.0) the decoder output is multiplied by
    ``d_model ** -0.5`` before ``lm_head``.
    """

    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = []

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.model_dim = config.d_model
        self._build_stacks(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache_position: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Seq2SeqLMOutput | tuple[Any, ...]:
        check_decoder_inputs(decoder_input_ids, labels)
        if labels is not None and decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self._shift_right(labels)
        encoded, decoded = self._encode_decode(
            input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs, past_key_values,
            inputs_embeds, decoder_inputs_embeds, use_cache, output_attentions, output_hidden_states,
        )  # fmt: skip
        sequence_output = decoded.last_hidden_state
        if self.config.scale_decoder_outputs:
            sequence_output = sequence_output * (self.model_dim**-0.5)
        logits = self.lm_head(sequence_output)
        output = Seq2SeqLMOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            **_seq2seq_fields(encoded, decoded),
        )
        return self._returned(output, return_dict)


class T5EncoderModel(T5PreTrainedModel):
    """The encoder alone (``shared`` + ``encoder``): text embeddings, the text encoder of diffusion models."""

    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        *T5PreTrainedModel._keys_to_ignore_on_load_unexpected,
        r"^decoder\.",
    ]

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = T5Stack(config, self.shared, is_decoder=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.shared

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.shared = value
        self.encoder.set_input_embeddings(value)

    def get_encoder(self) -> T5Stack:
        return self.encoder

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple[Any, ...]:
        output = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
            call_layer=self._call_layer,
        )  # fmt: skip
        return self._returned(output, return_dict)


class T5ClassificationHead(nn.Module):
    """``out_proj(dropout(tanh(dense(dropout(x)))))`` on the sentence representation."""

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.dropout = nn.Dropout(p=config.classifier_dropout)
        self.out_proj = nn.Linear(config.d_model, config.num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = torch.tanh(self.dense(self.dropout(hidden_states)))
        return self.out_proj(self.dropout(hidden_states))


def _decoder_inputs_from(input_ids: torch.Tensor | None, decoder_input_ids: Any, decoder_inputs_embeds: Any,
                         shift: Callable[[torch.Tensor], torch.Tensor], head: str) -> Any:  # fmt: skip
    if decoder_input_ids is not None or decoder_inputs_embeds is not None:
        return decoder_input_ids
    if input_ids is None:
        raise T5InputError(f"{head} needs input_ids (shifted right into the decoder inputs) or decoder_input_ids")
    return shift(input_ids)


class T5ForSequenceClassification(T5PreTrainedModel):
    """``T5Model`` read at each row's last ``eos_token_id`` (decoder side), then a tanh classification head.

    Every row must hold the same number (at least one) of end-of-sequence tokens, as in the reference.
    The loss follows ``config.problem_type``.
    """

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.transformer = T5Model(config)
        self.classification_head = T5ClassificationHead(config)
        self.post_init()

    def tie_weights(self) -> None:
        if hasattr(self, "transformer"):
            self.transformer.tie_weights()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqSequenceClassifierOutput | tuple[Any, ...]:
        if input_ids is None:
            raise T5InputError("T5ForSequenceClassification needs input_ids (it reads the eos positions from them)")
        decoder_input_ids = _decoder_inputs_from(
            input_ids, decoder_input_ids, decoder_inputs_embeds, self._shift_right, type(self).__name__
        )
        outputs = self.transformer(
            input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds, decoder_inputs_embeds=decoder_inputs_embeds, use_cache=False,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
        )  # fmt: skip
        sequence_output = outputs.last_hidden_state
        eos_mask = input_ids.eq(self.config.eos_token_id).to(sequence_output.device)
        counts = eos_mask.sum(1)
        if bool((counts == 0).any()) or bool((counts != counts[0]).any()):
            raise T5InputError(
                f"T5ForSequenceClassification reads the last eos token (id {self.config.eos_token_id}) of each row: "
                f"every row needs the same number of them, at least one (found {counts.tolist()})"
            )
        batch, _, hidden = sequence_output.shape
        sentence = sequence_output[eos_mask, :].view(batch, -1, hidden)[:, -1, :]
        logits = self.classification_head(sentence)
        output = Seq2SeqSequenceClassifierOutput(
            loss=sequence_classification_loss(logits, labels, self.config) if labels is not None else None,
            logits=logits,
            past_key_values=None,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )
        return self._returned(output, return_dict)


class T5ForTokenClassification(T5PreTrainedModel):
    """The encoder (``transformer`` is a ``T5EncoderModel``) and a per-token linear classifier."""

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.transformer = T5EncoderModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    def tie_weights(self) -> None:
        if hasattr(self, "transformer"):
            self.transformer.tie_weights()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[Any, ...]:
        encoded = self.transformer(
            input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
        )  # fmt: skip
        logits = self.classifier(self.dropout(encoded.last_hidden_state))
        output = TokenClassifierOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class T5ForQuestionAnswering(_EncoderDecoder):
    """Encoder, decoder and ``qa_outputs`` (start and end logits per decoder position; ``num_labels`` = 2)."""

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self._build_stacks(config)
        self.qa_outputs = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqQuestionAnsweringModelOutput | tuple[Any, ...]:
        decoder_input_ids = _decoder_inputs_from(
            input_ids, decoder_input_ids, decoder_inputs_embeds, self._shift_right, type(self).__name__
        )
        encoded, decoded = self._encode_decode(
            input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs, None,
            inputs_embeds, decoder_inputs_embeds, False, output_attentions, output_hidden_states,
        )  # fmt: skip
        start_logits, end_logits = self.qa_outputs(decoded.last_hidden_state).split(1, dim=-1)
        start_logits, end_logits = start_logits.squeeze(-1).contiguous(), end_logits.squeeze(-1).contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        output = Seq2SeqQuestionAnsweringModelOutput(
            loss=loss, start_logits=start_logits, end_logits=end_logits, **_seq2seq_fields(encoded, decoded)
        )
        return self._returned(output, return_dict)


# -- mT5 and UMT5: the same modules under their own names and configs ----------------------------------
class MT5Model(T5Model):
    config_class = MT5Config


class MT5ForConditionalGeneration(T5ForConditionalGeneration):
    config_class = MT5Config


class MT5EncoderModel(T5EncoderModel):
    config_class = MT5Config


class MT5ForSequenceClassification(T5ForSequenceClassification):
    config_class = MT5Config


class MT5ForTokenClassification(T5ForTokenClassification):
    config_class = MT5Config


class MT5ForQuestionAnswering(T5ForQuestionAnswering):
    config_class = MT5Config


class UMT5Model(T5Model):
    config_class = UMT5Config


class UMT5ForConditionalGeneration(T5ForConditionalGeneration):
    config_class = UMT5Config


class UMT5EncoderModel(T5EncoderModel):
    config_class = UMT5Config


class UMT5ForSequenceClassification(T5ForSequenceClassification):
    config_class = UMT5Config


class UMT5ForTokenClassification(T5ForTokenClassification):
    config_class = UMT5Config


class UMT5ForQuestionAnswering(T5ForQuestionAnswering):
    config_class = UMT5Config

"""BART encoder-decoder and its task heads, written out top to bottom.

Reading order: embeddings (scaled tokens, learned positions with BART's offset of 2), attention (``q_proj``,
``k_proj``, ``v_proj``, ``out_proj``; self-attention and cross-attention), encoder layer, decoder layer, the
pre-trained base class, encoder, decoder, base model, then the heads (conditional generation, sequence
classification, question answering). The configuration is ``BartConfig`` in ``configuration_bart.py``.

Parameter names equal the reference implementation's checkpoint tensor names (``model.shared.weight``,
``model.encoder.layers.{i}.self_attn.k_proj.weight``, ``model.encoder.layernorm_embedding.weight``,
``model.decoder.layers.{i}.encoder_attn.q_proj.weight``, ``final_logits_bias``, ``lm_head.weight``,
``classification_head.dense.weight``, ``qa_outputs.weight``). The encoder and the decoder hold the same
``shared`` embedding module, so ``encoder.embed_tokens.weight`` and ``decoder.embed_tokens.weight`` are the
same tensor as ``shared.weight`` and are neither saved nor expected in a checkpoint.

The decoder takes and returns an ``EncoderDecoderCache``: self-attention keys/values grow by the new tokens of
each call, cross-attention keys/values are computed from the encoder output once (``cross_attention_states``).
Decoder positions continue from the cache length. mBART (``modeling_mbart.py``) and Marian
(``microformers-marian``) subclass these classes; the hooks they override are ``layer_class``,
``_add_norms``, ``embed``, ``finish``, ``encoder_class``/``decoder_class``, ``model_class`` and ``shift_tokens``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from microformers import PreTrainedModel
from microformers.errors import InputError
from microformers.outputs import ModelOutput
from microformers_sdk.attention import AttentionFunction, eager_attention, get_attention_function
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import sequence_classification_loss, span_loss, token_cross_entropy
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqQuestionAnsweringModelOutput,
    Seq2SeqSequenceClassifierOutput,
)
from microformers_sdk.seq2seq import (
    EncoderDecoderCache,
    Seq2SeqLMMixin,
    as_encoder_decoder_cache,
    as_encoder_output,
    check_decoder_inputs,
    shift_tokens_right,
)

from .configuration_bart import BartConfig

__all__ = [
    "BartAttention",
    "BartConfig",
    "BartDecoder",
    "BartDecoderLayer",
    "BartEncoder",
    "BartEncoderLayer",
    "BartForConditionalGeneration",
    "BartForQuestionAnswering",
    "BartForSequenceClassification",
    "BartInputError",
    "BartModel",
    "BartPreTrainedModel",
]


class BartInputError(InputError):
    """The arguments of a forward call do not fit the model (missing inputs, too long, wrong shapes)."""


# -- embeddings ----------------------------------------------------------------------------------------
class BartScaledWordEmbedding(nn.Embedding):
    """Token embeddings multiplied by ``embed_scale`` (``sqrt(d_model)`` when ``scale_embedding``, else 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None, embed_scale: float = 1.0):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids) * self.embed_scale


class BartLearnedPositionalEmbedding(nn.Embedding):
    """Learned positions; row ``p + 2`` holds position ``p`` (fairseq reserved the first two rows)."""

    offset = 2

    def __init__(self, num_positions: int, embedding_dim: int) -> None:
        super().__init__(num_positions + self.offset, embedding_dim)

    def forward(self, length: int, past_length: int = 0) -> torch.Tensor:  # type: ignore[override]
        """``(length, dim)`` embeddings of positions ``past_length .. past_length + length - 1``."""
        if past_length + length + self.offset > self.num_embeddings:
            raise BartInputError(
                f"positions up to {past_length + length} asked for, but this model has max_position_embeddings="
                f"{self.num_embeddings - self.offset}; truncate the input or generate fewer tokens"
            )
        positions = torch.arange(past_length, past_length + length, device=self.weight.device)
        return super().forward(positions + self.offset)


def _padding_idx(config: BartConfig, vocab_size: int) -> int | None:
    pad = config.pad_token_id
    return pad if isinstance(pad, int) and 0 <= pad < vocab_size else None


def _embed_scale(config: BartConfig) -> float:
    return math.sqrt(config.d_model) if config.scale_embedding else 1.0


# -- attention -----------------------------------------------------------------------------------------
class BartAttention(nn.Module):
    """Multi-head attention with ``q_proj``/``k_proj``/``v_proj``/``out_proj`` (all with bias), scaled by 1/sqrt(head_dim).

    Self-attention projects keys/values from ``hidden_states`` (appended to the cache's self-attention side
    when a cache is given); cross-attention (``key_value_states`` = the encoder output) projects them once
    per prompt through ``EncoderDecoderCache.cross_attention_states``.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, layer_idx: int = 0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = float(dropout or 0.0)
        self.layer_idx = layer_idx
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _heads(self, states: torch.Tensor) -> torch.Tensor:
        """``(batch, length, dim)`` -> ``(batch, heads, length, head_dim)``."""
        return states.view(*states.shape[:2], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool = False,
        key_value_states: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape
        query = self._heads(self.q_proj(hidden_states))
        if key_value_states is not None:

            def project() -> tuple[torch.Tensor, torch.Tensor]:
                return self._heads(self.k_proj(key_value_states)), self._heads(self.v_proj(key_value_states))

            key, value = cache.cross_attention_states(self.layer_idx, project) if cache is not None else project()
        else:
            key, value = self._heads(self.k_proj(hidden_states)), self._heads(self.v_proj(hidden_states))
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if output_attentions:  # only the eager kernel hands back the probabilities
            context, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal,
                return_weights=True,
            )  # fmt: skip
        else:
            context = attention_fn(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal
            )
        return self.out_proj(context.transpose(1, 2).reshape(batch, length, -1)), weights


# -- layers --------------------------------------------------------------------------------------------
class BartEncoderLayer(nn.Module):
    """Post-norm block: ``norm(x + self_attn(x))`` then ``norm(x + fc2(act(fc1(x))))``."""

    def __init__(self, config: BartConfig, layer_idx: int = 0) -> None:
        super().__init__()
        embed_dim = config.d_model
        self.self_attn = BartAttention(embed_dim, config.encoder_attention_heads, config.attention_dropout, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.activation_fn = get_activation(config.activation_function, "activation_function")
        self.fc1 = nn.Linear(embed_dim, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout = float(config.dropout or 0.0)
        self.activation_dropout = float(config.activation_dropout or 0.0)

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return F.dropout(self.fc2(hidden_states), p=self.dropout, training=self.training)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self_attn(hidden_states, attention_mask, attention_fn, output_attentions)
        attended = F.dropout(attended, p=self.dropout, training=self.training)
        hidden_states = self.self_attn_layer_norm(hidden_states + attended)
        hidden_states = self.final_layer_norm(hidden_states + self.feed_forward(hidden_states))
        return _clamp_half(hidden_states), weights


def _clamp_half(hidden_states: torch.Tensor) -> torch.Tensor:
    """float16 activations that overflowed are clamped back into range (as the reference does)."""
    if hidden_states.dtype == torch.float16 and not bool(torch.isfinite(hidden_states).all()):
        limit = torch.finfo(torch.float16).max - 1000
        hidden_states = hidden_states.clamp(min=-limit, max=limit)
    return hidden_states


# What a decoder layer returns: hidden states, self-attention and cross-attention probabilities.
DecoderLayerOutput = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]


class BartDecoderLayer(nn.Module):
    """Post-norm block: causal self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, config: BartConfig, layer_idx: int = 0) -> None:
        super().__init__()
        embed_dim = config.d_model
        heads = config.decoder_attention_heads
        self.self_attn = BartAttention(embed_dim, heads, config.attention_dropout, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.encoder_attn = BartAttention(embed_dim, heads, config.attention_dropout, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.activation_fn = get_activation(config.activation_function, "activation_function")
        self.fc1 = nn.Linear(embed_dim, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout = float(config.dropout or 0.0)
        self.activation_dropout = float(config.activation_dropout or 0.0)

    feed_forward = BartEncoderLayer.feed_forward

    def forward(
        self,
        hidden_states: torch.Tensor,
        self_mask: torch.Tensor | None,
        is_causal: bool,
        encoder_hidden_states: torch.Tensor | None,
        cross_mask: torch.Tensor | None,
        cache: EncoderDecoderCache | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> DecoderLayerOutput:
        attended, self_weights = self.self_attn(
            hidden_states, self_mask, attention_fn, output_attentions, cache=cache, is_causal=is_causal
        )
        hidden_states = self.self_attn_layer_norm(hidden_states + F.dropout(attended, self.dropout, self.training))
        cross_weights = None
        if encoder_hidden_states is not None:
            attended, cross_weights = self.encoder_attn(
                hidden_states, cross_mask, attention_fn, output_attentions, encoder_hidden_states, cache
            )
            attended = F.dropout(attended, self.dropout, self.training)
            hidden_states = self.encoder_attn_layer_norm(hidden_states + attended)
        hidden_states = self.final_layer_norm(hidden_states + self.feed_forward(hidden_states))
        return hidden_states, self_weights, cross_weights


# -- pre-trained base class ----------------------------------------------------------------------------
class BartPreTrainedModel(PreTrainedModel):
    """Weight init, the shared-embedding aliases and output packing, for every BART module that is a model."""

    config_class = BartConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["BartEncoderLayer", "BartDecoderLayer"]
    # fairseq conversions left version counters; older exports repeat the shared embedding per stack
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        r"(encoder|decoder)\.version$",
        r"(encoder|decoder)\.embed_tokens\.weight$",
    ]
    config: BartConfig

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, BartForConditionalGeneration):
            module.final_logits_bias.zero_()

    def tied_parameter_names(self) -> set[str]:
        """The head's tied output weights, plus the stacks' views of the shared embedding (one tensor, saved once)."""
        names = super().tied_parameter_names()
        shared = getattr(self.base_model, "shared", None)
        if shared is None:
            return names
        prefix = "" if self.base_model is self else f"{self.base_model_prefix}."
        for stack in ("encoder", "decoder"):
            if getattr(self.base_model, stack).embed_tokens is shared:
                names.add(f"{prefix}{stack}.embed_tokens.weight")
        return names

    def _returned(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    def _flags(self, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
        config = self.config
        return (
            config.output_attentions if output_attentions is None else output_attentions,
            config.output_hidden_states if output_hidden_states is None else output_hidden_states,
        )


def _check_one(what: str, ids: torch.Tensor | None, embeds: torch.Tensor | None) -> None:
    if (ids is None) == (embeds is None):
        raise BartInputError(f"pass exactly one of {what}_ids or {what}s_embeds")


def _cross_attention_mask(encoder_attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``(batch, 1, 1, source_length)`` booleans from the encoder's 0/1 padding mask; ``None`` without padding."""
    if encoder_attention_mask is None or encoder_attention_mask.dim() == 4:
        return encoder_attention_mask
    if not torch.compiler.is_exporting() and bool(encoder_attention_mask.all()):  # exported graphs keep the mask
        return None
    allowed = encoder_attention_mask[:, None, None, :].bool()
    return allowed | ~allowed.any(dim=-1, keepdim=True)  # an all-padding row attends everywhere, never NaN


# -- encoder -------------------------------------------------------------------------------------------
class BartEncoder(BartPreTrainedModel):
    """Embeddings, then ``encoder_layers`` bidirectional layers; what ``get_encoder()`` returns.

    ``hidden_states`` (with ``output_hidden_states``) holds each layer's input and the final output.
    """

    layer_class: ClassVar[type[nn.Module]] = BartEncoderLayer

    def __init__(self, config: BartConfig, embed_tokens: nn.Embedding | None = None) -> None:
        super().__init__(config)
        self.dropout = float(config.dropout or 0.0)
        self.layerdrop = float(config.encoder_layerdrop or 0.0)
        self.embed_tokens = embed_tokens if embed_tokens is not None else self._token_embedding(config)
        self.embed_positions = self._position_embedding(config)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.encoder_layers))
        self._add_norms(config)
        self.post_init()

    # hooks the variants override
    def _token_embedding(self, config: BartConfig) -> nn.Embedding:
        return BartScaledWordEmbedding(
            config.vocab_size, config.d_model, _padding_idx(config, config.vocab_size), _embed_scale(config)
        )

    def _position_embedding(self, config: BartConfig) -> nn.Module:
        return BartLearnedPositionalEmbedding(config.max_position_embeddings, config.d_model)

    def _add_norms(self, config: BartConfig) -> None:
        self.layernorm_embedding = nn.LayerNorm(config.d_model)

    def embed(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> torch.Tensor:
        """Token embeddings (unless given) plus positions, normalised (``layernorm_embedding``)."""
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        positions = self.embed_positions(inputs_embeds.shape[1]).to(inputs_embeds.dtype)
        return self.layernorm_embedding(inputs_embeds + positions)

    def finish(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """What follows the last layer (nothing for post-norm BART)."""
        return hidden_states

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutput | tuple[Any, ...]:
        """``attention_mask`` is the tokenizer's ``(batch, length)`` 0/1 padding mask."""
        _check_one("input", input_ids, inputs_embeds)
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        hidden_states = F.dropout(self.embed(input_ids, inputs_embeds), self.dropout, self.training)
        length = hidden_states.shape[1]
        if attention_mask is not None and attention_mask.dim() == 2 and attention_mask.shape[-1] != length:
            raise BartInputError(
                f"attention_mask has {attention_mask.shape[-1]} columns but the input has {length} tokens; "
                "pass the mask the tokenizer returned with these input_ids"
            )
        mask, _ = build_attention_mask(attention_mask, length, 0, causal=False, device=hidden_states.device)
        attention_fn = get_attention_function(self.config)
        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor | None] = []
        for layer in self.layers:
            all_hidden_states.append(hidden_states)
            if self.training and self.layerdrop > 0.0 and bool(torch.rand([]) < self.layerdrop):
                continue
            hidden_states, weights = self._call_layer(layer, hidden_states, mask, attention_fn, output_attentions)
            all_attentions.append(weights)
        hidden_states = self.finish(hidden_states)
        all_hidden_states.append(hidden_states)
        output = BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
        )
        return self._returned(output, return_dict)


# -- decoder -------------------------------------------------------------------------------------------
class BartDecoder(BartPreTrainedModel):
    """Embeddings (positions continuing from the cache), then ``decoder_layers`` causal, cross-attending layers."""

    layer_class: ClassVar[type[nn.Module]] = BartDecoderLayer

    def __init__(self, config: BartConfig, embed_tokens: nn.Embedding | None = None) -> None:
        super().__init__(config)
        self.dropout = float(config.dropout or 0.0)
        self.layerdrop = float(config.decoder_layerdrop or 0.0)
        self.embed_tokens = embed_tokens if embed_tokens is not None else self._token_embedding(config)
        self.embed_positions = self._position_embedding(config)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.decoder_layers))
        self._add_norms(config)
        self.post_init()

    _token_embedding = BartEncoder._token_embedding
    _position_embedding = BartEncoder._position_embedding
    _add_norms = BartEncoder._add_norms
    finish = BartEncoder.finish
    get_input_embeddings = BartEncoder.get_input_embeddings
    set_input_embeddings = BartEncoder.set_input_embeddings

    def embed(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, past_length: int
    ) -> torch.Tensor:
        """Token embeddings (unless given) plus positions from ``past_length`` on, normalised."""
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        positions = self.embed_positions(inputs_embeds.shape[1], past_length).to(inputs_embeds.dtype)
        return self.layernorm_embedding(inputs_embeds + positions)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple[Any, ...]:
        """``attention_mask`` covers the cached and the new decoder tokens (``(batch, past + new)``), or is None."""
        _check_one("decoder_input", input_ids, inputs_embeds)
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        cache = as_encoder_decoder_cache(past_key_values)
        if cache is None and use_cache:
            cache = EncoderDecoderCache()
        past_length = cache.get_seq_length() if cache is not None else 0

        hidden_states = F.dropout(self.embed(input_ids, inputs_embeds, past_length), self.dropout, self.training)
        length = hidden_states.shape[1]
        self_mask, is_causal = build_attention_mask(
            attention_mask, length, past_length, causal=True, device=hidden_states.device
        )
        cross_mask = _cross_attention_mask(encoder_attention_mask)
        attention_fn = get_attention_function(self.config)
        all_hidden_states: list[torch.Tensor] = []
        all_self: list[torch.Tensor | None] = []
        all_cross: list[torch.Tensor | None] = []
        for layer in self.layers:
            all_hidden_states.append(hidden_states)
            if self.training and self.layerdrop > 0.0 and bool(torch.rand([]) < self.layerdrop):
                continue
            hidden_states, self_weights, cross_weights = self._call_layer(
                layer, hidden_states, self_mask, is_causal, encoder_hidden_states, cross_mask, cache, attention_fn,
                output_attentions,
            )  # fmt: skip
            all_self.append(self_weights)
            all_cross.append(cross_weights)
        hidden_states = self.finish(hidden_states)
        all_hidden_states.append(hidden_states)
        output = BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            past_key_values=cache if use_cache else None,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_self) if output_attentions else None,
            cross_attentions=tuple(all_cross) if output_attentions and encoder_hidden_states is not None else None,
        )
        return self._returned(output, return_dict)


# -- base model ----------------------------------------------------------------------------------------
class BartModel(BartPreTrainedModel):
    """Shared token embeddings, encoder and decoder; returns ``Seq2SeqModelOutput`` (decoder states first).

    Without ``decoder_input_ids`` (and ``decoder_inputs_embeds``) the decoder reads ``input_ids`` shifted right
    (``shift_tokens``), as in BART's denoising pre-training.
    """

    encoder_class: ClassVar[type[BartEncoder]] = BartEncoder
    decoder_class: ClassVar[type[BartDecoder]] = BartDecoder

    def __init__(self, config: BartConfig) -> None:
        super().__init__(config)
        shared = self._shared_embedding(config)
        if shared is not None:
            self.shared = shared
        self.encoder = self.encoder_class(config, shared)
        self.decoder = self.decoder_class(config, shared)
        self.post_init()

    def _shared_embedding(self, config: BartConfig) -> nn.Embedding | None:
        return BartScaledWordEmbedding(
            config.vocab_size, config.d_model, _padding_idx(config, config.vocab_size), _embed_scale(config)
        )

    def shift_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Decoder inputs from target ids: one position right, ``decoder_start_token_id`` first."""
        return shift_tokens_right(input_ids, self.config.pad_token_id, self.config.decoder_start_token_id)

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        if hasattr(self, "shared"):
            self.shared = value
            self.decoder.embed_tokens = value
        self.encoder.embed_tokens = value

    def get_encoder(self) -> BartEncoder:
        return self.encoder

    def get_decoder(self) -> BartDecoder:
        return self.decoder

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
        **kwargs: Any,
    ) -> Seq2SeqModelOutput | tuple[Any, ...]:
        """``encoder_outputs`` (the encoder's output, or a tuple starting with its last hidden state) skips the encoder."""
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            if input_ids is None:
                raise BartInputError(
                    "without decoder_input_ids or decoder_inputs_embeds the decoder reads input_ids shifted right, "
                    "but input_ids is None too; pass decoder_input_ids"
                )
            decoder_input_ids = self.shift_tokens(input_ids)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids, attention_mask, inputs_embeds, output_attentions, output_hidden_states, return_dict=True
            )
        else:
            encoder_outputs = as_encoder_output(encoder_outputs)
        decoded = self.decoder(
            decoder_input_ids, decoder_attention_mask, encoder_outputs.last_hidden_state, attention_mask,
            past_key_values, decoder_inputs_embeds, use_cache, output_attentions, output_hidden_states,
            return_dict=True,
        )  # fmt: skip
        output = Seq2SeqModelOutput(
            last_hidden_state=decoded.last_hidden_state,
            past_key_values=decoded.past_key_values,
            decoder_hidden_states=decoded.hidden_states,
            decoder_attentions=decoded.attentions,
            cross_attentions=decoded.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return self._returned(output, return_dict)


def _seq2seq_fields(outputs: Seq2SeqModelOutput) -> dict[str, Any]:
    """The fields every seq2seq head output copies from the base model's output."""
    return {
        "past_key_values": outputs.past_key_values,
        "decoder_hidden_states": outputs.decoder_hidden_states,
        "decoder_attentions": outputs.decoder_attentions,
        "cross_attentions": outputs.cross_attentions,
        "encoder_last_hidden_state": outputs.encoder_last_hidden_state,
        "encoder_hidden_states": outputs.encoder_hidden_states,
        "encoder_attentions": outputs.encoder_attentions,
    }


# -- heads ---------------------------------------------------------------------------------------------
class BartForConditionalGeneration(Seq2SeqLMMixin, BartPreTrainedModel):
    """Base model plus ``lm_head`` (tied to the shared embeddings) and the ``final_logits_bias`` buffer.

    With ``labels`` (``-100`` not scored) and no decoder inputs, the decoder reads the labels shifted right
    (``prepare_decoder_input_ids_from_labels``); the cache is then not built.
    """

    model_class: ClassVar[type[BartModel]] = BartModel
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "model.shared.weight"}
    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = [r"^final_logits_bias$"]

    def __init__(self, config: BartConfig) -> None:
        super().__init__(config)
        self.model = self.model_class(config)
        target_vocab = self.model.decoder.embed_tokens.num_embeddings
        self.register_buffer("final_logits_bias", torch.zeros((1, target_vocab)))
        self.lm_head = nn.Linear(config.d_model, target_vocab, bias=False)
        self.post_init()

    def get_encoder(self) -> BartEncoder:
        return self.model.encoder

    def get_decoder(self) -> BartDecoder:
        return self.model.decoder

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head = value

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Module:
        """As the kernel's, and ``final_logits_bias`` cut or zero-extended to the new vocabulary."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        rows = self.lm_head.weight.shape[0]
        bias = self.final_logits_bias[:, :rows]
        if rows > bias.shape[1]:
            bias = torch.cat([bias, bias.new_zeros((1, rows - bias.shape[1]))], dim=1)
        self.final_logits_bias = bias
        return embeddings

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
        **kwargs: Any,
    ) -> Seq2SeqLMOutput | tuple[Any, ...]:
        if labels is not None:
            use_cache = False
            check_decoder_inputs(decoder_input_ids, labels)
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs, past_key_values,
            inputs_embeds, decoder_inputs_embeds, use_cache, output_attentions, output_hidden_states, return_dict=True,
        )  # fmt: skip
        logits = self.lm_head(outputs.last_hidden_state) + self.final_logits_bias.to(outputs.last_hidden_state.dtype)
        output = Seq2SeqLMOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            **_seq2seq_fields(outputs),
        )
        return self._returned(output, return_dict)


class BartClassificationHead(nn.Module):
    """``out_proj(dropout(tanh(dense(dropout(x)))))`` on the pooled state."""

    def __init__(self, input_dim: int, inner_dim: int, num_classes: int, pooler_dropout: float) -> None:
        super().__init__()
        self.dense = nn.Linear(input_dim, inner_dim)
        self.dropout = nn.Dropout(p=pooler_dropout)
        self.out_proj = nn.Linear(inner_dim, num_classes)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = torch.tanh(self.dense(self.dropout(hidden_states)))
        return self.out_proj(self.dropout(hidden_states))


def eos_pooled(hidden_states: torch.Tensor, input_ids: torch.Tensor, eos_token_id: Any) -> torch.Tensor:
    """The decoder state at each row's last ``eos_token_id`` (rows must hold the same number of them)."""
    eos = eos_token_id[0] if isinstance(eos_token_id, (list, tuple)) else eos_token_id
    eos_mask = input_ids.eq(eos).to(hidden_states.device)
    counts = eos_mask.sum(1)
    if bool((counts == 0).any()):
        raise BartInputError(f"every row of input_ids must hold the eos token {eos}; the classifier reads its state")
    if bool((counts != counts[0]).any()):
        raise BartInputError(
            f"all rows of input_ids must hold the same number of eos tokens ({eos}), got {counts.tolist()}"
        )
    selected = hidden_states[eos_mask, :].view(hidden_states.shape[0], -1, hidden_states.shape[-1])
    return selected[:, -1, :]


class BartForSequenceClassification(BartPreTrainedModel):
    """Classifier on the decoder state at the last eos token (``classification_head.dense``/``out_proj``)."""

    model_class: ClassVar[type[BartModel]] = BartModel

    def __init__(self, config: BartConfig) -> None:
        super().__init__(config)
        self.model = self.model_class(config)
        self.classification_head = BartClassificationHead(
            config.d_model, config.d_model, config.num_labels, float(config.classifier_dropout or 0.0)
        )
        self.post_init()

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
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqSequenceClassifierOutput | tuple[Any, ...]:
        """The loss follows ``config.problem_type``; ``input_ids`` are needed (they locate the eos tokens)."""
        if input_ids is None:
            raise BartInputError(f"{type(self).__name__} needs input_ids: it pools the state at the eos token")
        if labels is not None:
            use_cache = False
        outputs = self.model(
            input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs, None,
            inputs_embeds, decoder_inputs_embeds, use_cache, output_attentions, output_hidden_states, return_dict=True,
        )  # fmt: skip
        pooled = eos_pooled(outputs.last_hidden_state, input_ids, self.config.eos_token_id)
        logits = self.classification_head(pooled)
        output = Seq2SeqSequenceClassifierOutput(
            loss=sequence_classification_loss(logits, labels, self.config) if labels is not None else None,
            logits=logits,
            **_seq2seq_fields(outputs),
        )
        return self._returned(output, return_dict)


class BartForQuestionAnswering(BartPreTrainedModel):
    """Extractive QA on the decoder states: ``qa_outputs`` gives start and end logits (``num_labels`` is set to 2)."""

    model_class: ClassVar[type[BartModel]] = BartModel

    def __init__(self, config: BartConfig) -> None:
        config.num_labels = 2  # as the reference: start and end
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = self.model_class(config)
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
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqQuestionAnsweringModelOutput | tuple[Any, ...]:
        """The span loss when both ``start_positions`` and ``end_positions`` are given."""
        scored = start_positions is not None and end_positions is not None
        if scored:
            use_cache = False
        outputs = self.model(
            input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs, None,
            inputs_embeds, decoder_inputs_embeds, use_cache, output_attentions, output_hidden_states, return_dict=True,
        )  # fmt: skip
        logits = self.qa_outputs(outputs.last_hidden_state)
        start_logits, end_logits = (part.squeeze(-1).contiguous() for part in logits.split(1, dim=-1))
        output = Seq2SeqQuestionAnsweringModelOutput(
            loss=span_loss(start_logits, end_logits, start_positions, end_positions) if scored else None,
            start_logits=start_logits,
            end_logits=end_logits,
            **_seq2seq_fields(outputs),
        )
        return self._returned(output, return_dict)


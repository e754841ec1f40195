"""Whisper encoder-decoder and its heads, written out top to bottom.

Reading order: positions (the encoder's sinusoidal table, stored as ``embed_positions.weight`` as the reference
does; the decoder's learned positions counted from the cache length), attention (``q_proj``, ``k_proj`` without
bias, ``v_proj``, ``out_proj``; self- and cross-attention), the pre-norm encoder and decoder layers, the
pre-trained base class, the encoder (``conv1``/``conv2`` with GELU over the log-mel frames, then the layers and
``layer_norm``), the decoder, ``WhisperModel``, and the heads: ``WhisperForConditionalGeneration`` (``proj_out``
tied to ``model.decoder.embed_tokens``; its ``generate`` lives in ``generation_whisper.py``) and
``WhisperForAudioClassification`` (encoder, ``projector``, mean pooling, ``classifier``).

The encoder takes exactly ``2 * max_source_positions`` frames (30 s of audio for the released checkpoints): the
feature extractor pads and truncates to that. The decoder takes and returns an ``EncoderDecoderCache``;
cross-attention keys/values are computed from the encoder output once. Whisper masks no encoder frames: the
encoder's ``attention_mask`` is accepted and ignored, as in the reference.
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
from microformers_sdk.losses import token_cross_entropy
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    SequenceClassifierOutput,
)
from microformers_sdk.seq2seq import (
    EncoderDecoderCache,
    Seq2SeqLMMixin,
    as_encoder_decoder_cache,
    as_encoder_output,
    check_decoder_inputs,
)

from .configuration_whisper import WhisperConfig

__all__ = [
    "WhisperAttention",
    "WhisperConfig",
    "WhisperDecoder",
    "WhisperDecoderLayer",
    "WhisperEncoder",
    "WhisperEncoderLayer",
    "WhisperForAudioClassification",
    "WhisperForConditionalGeneration",
    "WhisperInputError",
    "WhisperModel",
    "WhisperPreTrainedModel",
    "sinusoids",
]


class WhisperInputError(InputError):
    """The arguments of a forward call do not fit the model (frame count, mel bins, too many tokens)."""


# -- positions -----------------------------------------------------------------------------------------
def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """``(length, channels)``: sines of every position in the first half of the features, cosines in the second."""
    if channels % 2 != 0:
        raise WhisperInputError(f"sinusoidal positions need an even d_model, got {channels}")
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length).view(-1, 1) * inv_timescales.view(1, -1)
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)


class WhisperPositionalEmbedding(nn.Embedding):
    """The decoder's learned positions: row ``p`` holds position ``p``."""

    def forward(  # type: ignore[override]
        self, length: int, past_length: int = 0, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(length, dim)`` embeddings from ``past_length`` on, or ``(batch, length, dim)`` for ``position_ids``."""
        if position_ids is not None:
            return self.weight[position_ids]
        if past_length + length > self.num_embeddings:
            raise WhisperInputError(
                f"decoder positions up to {past_length + length} asked for, but this model has max_target_positions="
                f"{self.num_embeddings}; generate fewer tokens (max_new_tokens) or shorten the prompt"
            )
        return self.weight[past_length : past_length + length]


# -- attention -----------------------------------------------------------------------------------------
class WhisperAttention(nn.Module):
    """Multi-head attention with ``q_proj``/``k_proj``/``v_proj``/``out_proj``; ``k_proj`` has no bias.

    Self-attention projects keys/values from ``hidden_states`` (appended to the cache's self-attention side
    when a cache is given); cross-attention (``key_value_states`` = the encoder output) projects them once per
    input through ``EncoderDecoderCache.cross_attention_states``.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, layer_idx: int = 0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = float(dropout or 0.0)
        self.layer_idx = layer_idx
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    # _heads and forward are copies of BartAttention's (microformers-bart), kept in sync by
    # tests/integration/test_model_copies_in_sync.py; only k_proj's missing bias differs.
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
def _clamp_half(hidden_states: torch.Tensor) -> torch.Tensor:
    """float16 activations are clamped into range after each encoder layer (as the reference does)."""
    if hidden_states.dtype == torch.float16:
        limit = torch.finfo(torch.float16).max - 1000
        hidden_states = hidden_states.clamp(min=-limit, max=limit)
    return hidden_states


class WhisperEncoderLayer(nn.Module):
    """Pre-norm block: ``x + self_attn(norm(x))`` then ``x + fc2(act(fc1(norm(x))))``."""

    def __init__(self, config: WhisperConfig, layer_idx: int = 0) -> None:
        super().__init__()
        embed_dim = config.d_model
        self.self_attn = WhisperAttention(
            embed_dim, config.encoder_attention_heads, config.attention_dropout, layer_idx
        )
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.activation_fn = get_activation(config.activation_function, "activation_function")
        self.fc1 = nn.Linear(embed_dim, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout = float(config.dropout or 0.0)
        self.activation_dropout = float(config.activation_dropout or 0.0)

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_fn(self.fc1(self.final_layer_norm(hidden_states)))
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return F.dropout(self.fc2(hidden_states), p=self.dropout, training=self.training)

    def forward(
        self, hidden_states: torch.Tensor, attention_fn: AttentionFunction, output_attentions: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self_attn(
            self.self_attn_layer_norm(hidden_states), None, attention_fn, output_attentions
        )
        hidden_states = hidden_states + F.dropout(attended, p=self.dropout, training=self.training)
        hidden_states = hidden_states + self.feed_forward(hidden_states)
        return _clamp_half(hidden_states), weights


# What a decoder layer returns: hidden states, self-attention and cross-attention probabilities.
DecoderLayerOutput = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]


class WhisperDecoderLayer(nn.Module):
    """Pre-norm block: causal self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, config: WhisperConfig, layer_idx: int = 0) -> None:
        super().__init__()
        embed_dim = config.d_model
        heads = config.decoder_attention_heads
        self.self_attn = WhisperAttention(embed_dim, heads, config.attention_dropout, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.encoder_attn = WhisperAttention(embed_dim, heads, config.attention_dropout, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.activation_fn = get_activation(config.activation_function, "activation_function")
        self.fc1 = nn.Linear(embed_dim, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout = float(config.dropout or 0.0)
        self.activation_dropout = float(config.activation_dropout or 0.0)

    feed_forward = WhisperEncoderLayer.feed_forward

    def forward(
        self,
        hidden_states: torch.Tensor,
        self_mask: torch.Tensor | None,
        is_causal: bool,
        encoder_hidden_states: torch.Tensor | None,
        cache: EncoderDecoderCache | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> DecoderLayerOutput:
        attended, self_weights = self.self_attn(
            self.self_attn_layer_norm(hidden_states), self_mask, attention_fn, output_attentions, cache=cache,
            is_causal=is_causal,
        )  # fmt: skip
        hidden_states = hidden_states + F.dropout(attended, self.dropout, self.training)
        cross_weights = None
        if encoder_hidden_states is not None:
            attended, cross_weights = self.encoder_attn(
                self.encoder_attn_layer_norm(hidden_states), None, attention_fn, output_attentions,
                encoder_hidden_states, cache,
            )  # fmt: skip
            hidden_states = hidden_states + F.dropout(attended, self.dropout, self.training)
        hidden_states = hidden_states + self.feed_forward(hidden_states)
        return hidden_states, self_weights, cross_weights


# -- pre-trained base class ----------------------------------------------------------------------------
class WhisperPreTrainedModel(PreTrainedModel):
    """Weight init (sinusoids into the encoder's position table) and output packing for every Whisper module."""

    config_class = WhisperConfig
    base_model_prefix = "model"
    main_input_name = "input_features"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["WhisperEncoderLayer", "WhisperDecoderLayer"]
    config: WhisperConfig

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, WhisperEncoder):
            with torch.no_grad():
                module.embed_positions.weight.copy_(sinusoids(*module.embed_positions.weight.shape))
        elif isinstance(module, WhisperForAudioClassification) and self.config.use_weighted_layer_sum:
            with torch.no_grad():
                module.layer_weights.fill_(1.0 / (self.config.num_hidden_layers + 1))

    def _get_feat_extract_output_lengths(self, input_lengths: torch.Tensor) -> torch.Tensor:
        """Encoder frames from log-mel frames (``conv2`` has stride 2)."""
        return (input_lengths - 1) // 2 + 1

    def _returned(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    def _flags(self, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
        config = self.config
        return (
            config.output_attentions if output_attentions is None else output_attentions,
            config.output_hidden_states if output_hidden_states is None else output_hidden_states,
        )


# -- encoder -------------------------------------------------------------------------------------------
class WhisperEncoder(WhisperPreTrainedModel):
    """``conv1`` and ``conv2`` (stride 2) with GELU, sinusoidal positions, ``encoder_layers`` layers, ``layer_norm``.

    ``hidden_states`` (with ``output_hidden_states``) holds each layer's input and the final (normed) output.
    """

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__(config)
        embed_dim = config.d_model
        self.dropout = float(config.dropout or 0.0)
        self.layerdrop = float(config.encoder_layerdrop or 0.0)
        self.num_mel_bins = config.num_mel_bins
        self.max_source_positions = config.max_source_positions
        self.conv1 = nn.Conv1d(config.num_mel_bins, embed_dim, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(embed_dim, embed_dim, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(config.max_source_positions, embed_dim)
        self.embed_positions.requires_grad_(False)
        self.layers = nn.ModuleList(WhisperEncoderLayer(config, i) for i in range(config.encoder_layers))
        self.layer_norm = nn.LayerNorm(embed_dim)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.conv1

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.conv1 = value

    def _freeze_parameters(self) -> None:
        for param in self.parameters():
            param.requires_grad = False

    def check_features(self, input_features: torch.Tensor | None) -> torch.Tensor:
        """Refuse features that are not ``(batch, num_mel_bins, 2 * max_source_positions)``."""
        if not isinstance(input_features, torch.Tensor):
            raise WhisperInputError(
                "input_features is required: the (batch, num_mel_bins, frames) log-mel features from "
                "WhisperFeatureExtractor"
            )
        expected = self.max_source_positions * self.conv1.stride[0] * self.conv2.stride[0]
        if input_features.dim() != 3 or input_features.shape[1] != self.num_mel_bins:
            raise WhisperInputError(
                f"input_features must be (batch, num_mel_bins={self.num_mel_bins}, {expected}), got "
                f"{tuple(input_features.shape)}; use the feature extractor of this checkpoint "
                f"(WhisperFeatureExtractor(feature_size={self.num_mel_bins}))"
            )
        if input_features.shape[-1] != expected:
            raise WhisperInputError(
                f"input_features has {input_features.shape[-1]} frames but this model takes exactly {expected} "
                f"(2 * max_source_positions={self.max_source_positions}); pad or truncate the audio to 30 s "
                "(WhisperFeatureExtractor does this by default), and for longer audio use the pipeline's chunk_length_s"
            )
        return input_features

    def forward(
        self,
        input_features: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutput | tuple[Any, ...]:
        """``attention_mask`` is accepted for compatibility and not used (Whisper attends to every frame)."""
        input_features = self.check_features(input_features)
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        hidden_states = F.gelu(self.conv1(input_features.to(self.conv1.weight.dtype)))
        hidden_states = F.gelu(self.conv2(hidden_states)).permute(0, 2, 1)
        hidden_states = hidden_states + self.embed_positions.weight.to(hidden_states.dtype)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        attention_fn = get_attention_function(self.config)
        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor | None] = []
        for layer in self.layers:
            all_hidden_states.append(hidden_states)
            if self.training and self.layerdrop > 0.0 and bool(torch.rand([]) < self.layerdrop):
                all_attentions.append(None)
                continue
            hidden_states, weights = self._call_layer(layer, hidden_states, attention_fn, output_attentions)
            all_attentions.append(weights)
        hidden_states = self.layer_norm(hidden_states)
        all_hidden_states.append(hidden_states)
        output = BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
        )
        return self._returned(output, return_dict)


# -- decoder -------------------------------------------------------------------------------------------
class WhisperDecoder(WhisperPreTrainedModel):
    """Token embeddings plus learned positions (from the cache length), causal cross-attending layers, ``layer_norm``."""

    main_input_name = "input_ids"

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__(config)
        self.dropout = float(config.dropout or 0.0)
        self.layerdrop = float(config.decoder_layerdrop or 0.0)
        self.max_target_positions = config.max_target_positions
        pad = config.pad_token_id if isinstance(config.pad_token_id, int) else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, pad)
        self.embed_positions = WhisperPositionalEmbedding(config.max_target_positions, config.d_model)
        self.layers = nn.ModuleList(WhisperDecoderLayer(config, i) for i in range(config.decoder_layers))
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        past_key_values: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple[Any, ...]:
        """``attention_mask`` covers the cached and the new decoder tokens (``(batch, past + new)``), or is None."""
        if (input_ids is None) == (inputs_embeds is None):
            raise WhisperInputError("pass exactly one of decoder_input_ids or decoder_inputs_embeds")
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        cache = as_encoder_decoder_cache(past_key_values)
        if cache is None and use_cache:
            cache = EncoderDecoderCache()
        past_length = cache.get_seq_length() if cache is not None else 0

        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        length = inputs_embeds.shape[1]
        positions = self.embed_positions(length, past_length, position_ids)
        hidden_states = F.dropout(inputs_embeds + positions.to(inputs_embeds.dtype), self.dropout, self.training)
        self_mask, is_causal = build_attention_mask(
            attention_mask, length, past_length, causal=True, device=hidden_states.device
        )
        attention_fn = get_attention_function(self.config)
        all_hidden_states: list[torch.Tensor] = []
        all_self: list[torch.Tensor | None] = []
        all_cross: list[torch.Tensor | None] = []
        for layer in self.layers:
            all_hidden_states.append(hidden_states)
            if self.training and self.layerdrop > 0.0 and bool(torch.rand([]) < self.layerdrop):
                continue
            hidden_states, self_weights, cross_weights = self._call_layer(
                layer, hidden_states, self_mask, is_causal, encoder_hidden_states, cache, attention_fn,
                output_attentions,
            )  # fmt: skip
            all_self.append(self_weights)
            all_cross.append(cross_weights)
        hidden_states = self.layer_norm(hidden_states)
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
class WhisperModel(WhisperPreTrainedModel):
    """Encoder and decoder; returns ``Seq2SeqModelOutput`` (decoder states first)."""

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__(config)
        self.encoder = WhisperEncoder(config)
        self.decoder = WhisperDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.decoder.embed_tokens = value

    def get_encoder(self) -> WhisperEncoder:
        return self.encoder

    def get_decoder(self) -> WhisperDecoder:
        return self.decoder

    def freeze_encoder(self) -> None:
        """Stop gradients to the encoder's parameters (fine-tune the decoder only)."""
        self.encoder._freeze_parameters()

    def forward(
        self,
        input_features: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqModelOutput | tuple[Any, ...]:
        """``encoder_outputs`` (the encoder's output, or a tuple starting with its last hidden state) skips the encoder."""
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_features, None, output_attentions, output_hidden_states, return_dict=True
            )
        else:
            encoder_outputs = as_encoder_output(encoder_outputs)
        decoded = self.decoder(
            decoder_input_ids, decoder_attention_mask, encoder_outputs.last_hidden_state, past_key_values,
            decoder_inputs_embeds, decoder_position_ids, use_cache, output_attentions, output_hidden_states,
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


# -- heads ---------------------------------------------------------------------------------------------
class WhisperForConditionalGeneration(Seq2SeqLMMixin, WhisperPreTrainedModel):
    """Base model plus ``proj_out`` (tied to the decoder's token embeddings): speech recognition and translation.

    With ``labels`` (``-100`` not scored) and no decoder inputs, the decoder reads the labels shifted right; the
    cache is then not built. ``generate`` prepares Whisper's decoder prompt (language, task, timestamps).
    """

    _tied_weights_keys: ClassVar[dict[str, str]] = {"proj_out.weight": "model.decoder.embed_tokens.weight"}

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__(config)
        self.model = WhisperModel(config)
        self.proj_out = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.max_target_positions = config.max_target_positions
        self.post_init()

    def get_encoder(self) -> WhisperEncoder:
        return self.model.encoder

    def get_decoder(self) -> WhisperDecoder:
        return self.model.decoder

    def get_input_embeddings(self) -> nn.Module:
        return self.model.decoder.embed_tokens

    def get_output_embeddings(self) -> nn.Module:
        return self.proj_out

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.proj_out = value

    def freeze_encoder(self) -> None:
        """Stop gradients to the encoder's parameters (fine-tune the decoder only)."""
        self.model.encoder._freeze_parameters()

    def forward(
        self,
        input_features: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqLMOutput | tuple[Any, ...]:
        if (
            self.__dict__.get("_positions_from_decoder_mask")
            and decoder_position_ids is None
            and decoder_attention_mask is not None
            and decoder_input_ids is not None
        ):
            # generate() with left-padded decoder prompts (condition_on_prev_tokens): each row counts positions
            # from its first real token, as the reference's prepare_inputs_for_generation does
            positions = decoder_attention_mask.long().cumsum(-1) - 1
            positions = positions.masked_fill(decoder_attention_mask == 0, 0)
            decoder_position_ids = positions[..., -decoder_input_ids.shape[1] :]
        if labels is not None:
            if labels.shape[1] > self.max_target_positions:
                raise WhisperInputError(
                    f"labels has {labels.shape[1]} tokens but the decoder takes at most max_target_positions="
                    f"{self.max_target_positions}; truncate the transcripts"
                )
            use_cache = False
            check_decoder_inputs(decoder_input_ids, labels)
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_features, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs,
            past_key_values, decoder_inputs_embeds, decoder_position_ids, use_cache, output_attentions,
            output_hidden_states, return_dict=True,
        )  # fmt: skip
        logits = self.proj_out(outputs.last_hidden_state)
        output = Seq2SeqLMOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )
        return self._returned(output, return_dict)

    def generate(self, input_features: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """Whisper's ``generate``: language / task / timestamp prompt, then the standard encoder-decoder decoding.

        See ``generation_whisper.whisper_generate`` for the arguments (``language``, ``task``,
        ``return_timestamps``, ``prompt_ids``, and every standard generation setting).
        """
        from .generation_whisper import whisper_generate

        return whisper_generate(self, input_features, **kwargs)


class WhisperForAudioClassification(WhisperPreTrainedModel):
    """Encoder, ``projector``, mean over frames, ``classifier`` (optionally over a weighted sum of layer outputs)."""

    _config_sizes_not_built: ClassVar[tuple[str, ...]] = ("vocab_size",)  # no token embeddings here

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__(config)
        self.encoder = WhisperEncoder(config)
        if config.use_weighted_layer_sum:
            num_layers = config.num_hidden_layers + 1  # transformer layers + input embeddings
            self.layer_weights = nn.Parameter(torch.ones(num_layers) / num_layers)
        self.projector = nn.Linear(config.d_model, config.classifier_proj_size)
        self.classifier = nn.Linear(config.classifier_proj_size, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.encoder.set_input_embeddings(value)

    def freeze_encoder(self) -> None:
        """Train only the projector and classifier."""
        self.encoder._freeze_parameters()

    def forward(
        self,
        input_features: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput | tuple[Any, ...]:
        """Cross-entropy over ``num_labels`` classes when ``labels`` (``(batch,)``) are given."""
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        if self.config.use_weighted_layer_sum:
            output_hidden_states = True
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_features, None, output_attentions, output_hidden_states, return_dict=True
            )
        else:
            encoder_outputs = as_encoder_output(encoder_outputs)
        if self.config.use_weighted_layer_sum:
            stacked = torch.stack(encoder_outputs.hidden_states, dim=1)
            weights = F.softmax(self.layer_weights, dim=-1)
            hidden_states = (stacked * weights.view(-1, 1, 1)).sum(dim=1)
        else:
            hidden_states = encoder_outputs.last_hidden_state
        logits = self.classifier(self.projector(hidden_states).mean(dim=1))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.config.num_labels), labels.to(logits.device).view(-1))
        output = SequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=encoder_outputs.hidden_states,
            attentions=encoder_outputs.attentions,
        )
        return self._returned(output, return_dict)

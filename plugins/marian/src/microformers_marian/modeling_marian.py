"""MarianMT: the BART encoder-decoder (``microformers-bart``) with sinusoidal positions and no embedding norm.

What differs from BART is overridden here and nothing else: fixed sinusoidal position tables (computed, never
stored: the reference does not save ``embed_positions.weight`` from ``MarianMTModel`` and recomputes it on load),
no ``layernorm_embedding``, plain token embeddings multiplied by ``sqrt(d_model)`` in the stacks
(``scale_embedding``; the decoder scales given ``decoder_inputs_embeds`` too), and either one ``shared``
embedding or separate encoder / decoder vocabularies (``share_encoder_decoder_embeddings``,
``decoder_vocab_size``). Layers, attention, cache handling and heads are BART's (post-norm);
the decoder starts from ``decoder_start_token_id`` (the pad token in Marian's configs).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from microformers_bart import (
    BartDecoder,
    BartEncoder,
    BartForConditionalGeneration,
    BartInputError,
    BartModel,
    BartPreTrainedModel,
)

from .configuration_marian import MarianConfig

__all__ = [
    "MarianConfig",
    "MarianDecoder",
    "MarianEncoder",
    "MarianMTModel",
    "MarianModel",
    "MarianPreTrainedModel",
    "MarianSinusoidalPositionalEmbedding",
]


def sinusoidal_table(num_positions: int, dim: int) -> torch.Tensor:
    """``(num_positions, dim)``: sines of the even features in the first half, cosines of the odd ones after."""
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]
    features = torch.arange(dim, dtype=torch.float64)
    angles = positions / torch.pow(10000.0, 2 * torch.div(features, 2, rounding_mode="floor") / dim)
    sentinel = (dim + 1) // 2
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    table[:, :sentinel] = torch.sin(angles[:, 0::2])
    table[:, sentinel:] = torch.cos(angles[:, 1::2])
    return table.float()


class MarianSinusoidalPositionalEmbedding(nn.Module):
    """Fixed sinusoidal positions, a non-persistent ``weight`` buffer (computed, not loaded or saved)."""

    def __init__(self, num_positions: int, embedding_dim: int) -> None:
        super().__init__()
        self.register_buffer("weight", sinusoidal_table(num_positions, embedding_dim), persistent=False)

    def forward(self, length: int, past_length: int = 0) -> torch.Tensor:
        """``(length, dim)`` embeddings of positions ``past_length .. past_length + length - 1``."""
        if past_length + length > self.weight.shape[0]:
            raise BartInputError(
                f"positions up to {past_length + length} asked for, but this model has max_position_embeddings="
                f"{self.weight.shape[0]}; truncate the input or generate fewer tokens"
            )
        return self.weight[past_length : past_length + length]


class MarianPreTrainedModel(BartPreTrainedModel):
    config_class = MarianConfig
    # MarianModel files carry the computed position tables; they are recomputed here
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        *BartPreTrainedModel._keys_to_ignore_on_load_unexpected,
        r"embed_positions\.weight$",
    ]
    config: MarianConfig

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.config.d_model) if self.config.scale_embedding else 1.0


class MarianEncoder(MarianPreTrainedModel, BartEncoder):
    """BART's encoder with sinusoidal positions, scaled plain token embeddings and no embedding norm."""

    def _token_embedding(self, config: MarianConfig) -> nn.Embedding:
        return nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)

    def _position_embedding(self, config: MarianConfig) -> nn.Module:
        return MarianSinusoidalPositionalEmbedding(config.max_position_embeddings, config.d_model)

    def _add_norms(self, config: MarianConfig) -> None:
        pass  # no layernorm_embedding

    def embed(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        return inputs_embeds + self.embed_positions(inputs_embeds.shape[1]).to(inputs_embeds.dtype)


class MarianDecoder(MarianPreTrainedModel, BartDecoder):
    """BART's decoder with sinusoidal positions, its own vocabulary size and no embedding norm."""

    def _token_embedding(self, config: MarianConfig) -> nn.Embedding:
        return nn.Embedding(config.decoder_vocab_size, config.d_model, config.pad_token_id)

    _position_embedding = MarianEncoder._position_embedding
    _add_norms = MarianEncoder._add_norms

    def embed(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, past_length: int
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        inputs_embeds = inputs_embeds * self.embed_scale  # given embeddings are scaled too, as in the reference
        return inputs_embeds + self.embed_positions(inputs_embeds.shape[1], past_length).to(inputs_embeds.dtype)


class MarianModel(MarianPreTrainedModel, BartModel):
    """Encoder and decoder sharing ``shared`` (``share_encoder_decoder_embeddings``) or each with its own vocabulary."""

    encoder_class = MarianEncoder
    decoder_class = MarianDecoder

    def _shared_embedding(self, config: MarianConfig) -> nn.Embedding | None:
        if not config.share_encoder_decoder_embeddings:
            return None
        return nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)


class MarianMTModel(MarianPreTrainedModel, BartForConditionalGeneration):
    """The translation head: ``lm_head`` over the decoder vocabulary, tied to the decoder's token embeddings."""

    model_class = MarianModel
    # the decoder's embeddings are ``shared`` itself when the vocabularies are shared
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "model.decoder.embed_tokens.weight"}

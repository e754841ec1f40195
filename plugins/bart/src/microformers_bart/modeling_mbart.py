"""mBART: BART's classes with pre-norm layers, a final ``layer_norm`` after each stack, and a language-code shift.

What differs from ``modeling_bart.py`` is overridden here and nothing else: the encoder and decoder layers
normalise before each sub-block (``x + f(norm(x))``), ``MBartEncoder``/``MBartDecoder`` add ``layer_norm``
after the last layer, and ``shift_tokens_right`` moves each row's last non-pad token (the target language
code) to the front instead of starting from ``decoder_start_token_id``. Checkpoint names are the reference's
(``model.encoder.layer_norm.weight``, ``model.decoder.layers.{i}.encoder_attn_layer_norm.weight`` ...).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from microformers.errors import ConfigError
from microformers_sdk.attention import AttentionFunction

from .configuration_bart import MBartConfig
from .modeling_bart import (
    BartDecoder,
    BartDecoderLayer,
    BartEncoder,
    BartEncoderLayer,
    BartForConditionalGeneration,
    BartForQuestionAnswering,
    BartForSequenceClassification,
    BartModel,
    BartPreTrainedModel,
    DecoderLayerOutput,
    _clamp_half,
)

__all__ = [
    "MBartConfig",
    "MBartDecoder",
    "MBartEncoder",
    "MBartForConditionalGeneration",
    "MBartForQuestionAnswering",
    "MBartForSequenceClassification",
    "MBartModel",
    "MBartPreTrainedModel",
    "shift_tokens_right",
]


def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int | None) -> torch.Tensor:
    """``input_ids`` one position right, each row's last non-pad token (its language code) first; ``-100`` -> pad."""
    if pad_token_id is None:
        raise ConfigError("the model config has no pad_token_id: set config.pad_token_id to shift labels right")
    shifted = input_ids.clone().masked_fill_(input_ids == -100, pad_token_id)
    last = (shifted.ne(pad_token_id).sum(dim=1) - 1).clamp(min=0).unsqueeze(-1)
    start = shifted.gather(1, last).squeeze(-1)
    shifted[:, 1:] = shifted[:, :-1].clone()
    shifted[:, 0] = start
    return shifted


class MBartEncoderLayer(BartEncoderLayer):
    """Pre-norm: ``x + self_attn(norm(x))`` then ``x + fc2(act(fc1(norm(x))))``."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self_attn(
            self.self_attn_layer_norm(hidden_states), attention_mask, attention_fn, output_attentions
        )
        hidden_states = hidden_states + F.dropout(attended, self.dropout, self.training)
        hidden_states = hidden_states + self.feed_forward(self.final_layer_norm(hidden_states))
        return _clamp_half(hidden_states), weights


class MBartDecoderLayer(BartDecoderLayer):
    """Pre-norm: self-attention, cross-attention and feed-forward each read a normalised input."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        self_mask: torch.Tensor | None,
        is_causal: bool,
        encoder_hidden_states: torch.Tensor | None,
        cross_mask: torch.Tensor | None,
        cache: object,
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
                self.encoder_attn_layer_norm(hidden_states), cross_mask, attention_fn, output_attentions,
                encoder_hidden_states, cache,
            )  # fmt: skip
            hidden_states = hidden_states + F.dropout(attended, self.dropout, self.training)
        hidden_states = hidden_states + self.feed_forward(self.final_layer_norm(hidden_states))
        return hidden_states, self_weights, cross_weights


class MBartPreTrainedModel(BartPreTrainedModel):
    config_class = MBartConfig
    _no_split_modules: ClassVar[list[str]] = ["MBartEncoderLayer", "MBartDecoderLayer"]


class MBartEncoder(MBartPreTrainedModel, BartEncoder):
    """BART's encoder with pre-norm layers and a final ``layer_norm``."""

    layer_class = MBartEncoderLayer

    def _add_norms(self, config: MBartConfig) -> None:
        super()._add_norms(config)
        self.layer_norm = nn.LayerNorm(config.d_model)

    def finish(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(hidden_states)


class MBartDecoder(MBartPreTrainedModel, BartDecoder):
    """BART's decoder with pre-norm layers and a final ``layer_norm``."""

    layer_class = MBartDecoderLayer

    def _add_norms(self, config: MBartConfig) -> None:
        super()._add_norms(config)
        self.layer_norm = nn.LayerNorm(config.d_model)

    def finish(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(hidden_states)


class MBartModel(MBartPreTrainedModel, BartModel):
    """BART's base model over the mBART stacks; decoder inputs wrap the language code to the front."""

    encoder_class = MBartEncoder
    decoder_class = MBartDecoder

    def shift_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(input_ids, self.config.pad_token_id)


class MBartForConditionalGeneration(MBartPreTrainedModel, BartForConditionalGeneration):
    model_class = MBartModel

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id)


class MBartForSequenceClassification(MBartPreTrainedModel, BartForSequenceClassification):
    model_class = MBartModel


class MBartForQuestionAnswering(MBartPreTrainedModel, BartForQuestionAnswering):
    model_class = MBartModel

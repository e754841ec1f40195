"""RoBERTa encoder and its task heads.

Parameter names equal the checkpoint tensor names of the reference implementation
(``roberta.embeddings.word_embeddings.weight``, ``roberta.embeddings.position_embeddings.weight``,
``roberta.embeddings.token_type_embeddings.weight``, ``roberta.encoder.layer.{i}.attention.self.query.weight``,
``roberta.encoder.layer.{i}.attention.output.dense.weight``, ``...intermediate.dense``, ``...output.LayerNorm``,
``roberta.pooler.dense.weight``; heads: ``lm_head.dense``, ``lm_head.layer_norm``, ``lm_head.decoder``
(tied to the word embeddings), ``lm_head.bias``, ``classifier.dense``, ``classifier.out_proj``,
``classifier.weight`` (token classification), ``qa_outputs.weight``), so files load and save without renaming.

RoBERTa is BERT's encoder (the SDK's ``microformers_sdk.encoder`` layers, base model ``forward``, token
classification and QA heads) with three differences, all in this file:

1. Positions count from the padding index: a token's position id is ``padding_idx`` + its rank among the
   row's non-padding tokens (padding tokens get ``padding_idx`` itself), so left and right padding give the
   real tokens the same positions; from ``inputs_embeds`` the ids run ``padding_idx + 1, padding_idx + 2, ...``.
2. The masked-LM head is ``decoder(layer_norm(gelu(dense(h))))``.
3. The sequence classifier reads the first (``<s>``) token: ``out_proj(dropout(tanh(dense(dropout(h[:, 0])))))``,
   without the pooler.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import InputError
from microformers_sdk.encoder import (
    EncoderEmbeddings,
    EncoderForMaskedLM,
    EncoderForQuestionAnswering,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
    EncoderLayer,
    EncoderModelMixin,
    EncoderPreTrainedMixin,
    classifier_dropout,
)
from microformers_sdk.layers import get_activation

from .configuration_roberta import RobertaConfig

__all__ = [
    "RobertaConfig",
    "RobertaForMaskedLM",
    "RobertaForQuestionAnswering",
    "RobertaForSequenceClassification",
    "RobertaForTokenClassification",
    "RobertaInputError",
    "RobertaModel",
    "RobertaPreTrainedModel",
    "create_position_ids_from_input_ids",
]


class RobertaInputError(InputError):
    """The arguments of a forward call do not fit the model (missing inputs, too long, wrong shapes)."""


def create_position_ids_from_input_ids(input_ids: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """``padding_idx`` + the running count of non-padding tokens; padding tokens keep ``padding_idx``."""
    real = input_ids.ne(padding_idx).long()
    return torch.cumsum(real, dim=1) * real + padding_idx


class RobertaEmbeddings(EncoderEmbeddings):
    """Word, token type and absolute position embeddings; positions start after ``pad_token_id``."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(
            config.vocab_size, config.hidden_size, config.max_position_embeddings, config.type_vocab_size,
            config.layer_norm_eps, config.hidden_dropout_prob, config.pad_token_id, error=RobertaInputError,
        )  # fmt: skip
        self.padding_idx = config.pad_token_id
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=self.padding_idx
        )

    def default_position_ids(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor) -> torch.Tensor:
        length = inputs_embeds.shape[1]
        limit = self.position_embeddings.num_embeddings
        if length + self.padding_idx >= limit:
            raise self.error(
                f"the input has {length} tokens but this model takes at most {limit - self.padding_idx - 1} "
                f"(max_position_embeddings={limit} less the padding index {self.padding_idx} + 1, where "
                "positions start); truncate the input (e.g. tokenizer(..., truncation=True))"
            )
        if input_ids is not None:
            return create_position_ids_from_input_ids(input_ids, self.padding_idx)
        first = self.padding_idx + 1
        return torch.arange(first, first + length, device=inputs_embeds.device).unsqueeze(0)


class RobertaLayer(EncoderLayer):
    """Post-norm block: ``norm(x + attn(x))`` then ``norm(x + mlp(x))`` (the SDK's, under RoBERTa's name)."""


class RobertaLMHead(nn.Module):
    """``decoder(layer_norm(gelu(dense(h))))``; ``decoder.bias`` is ``bias`` (one tensor, two names)."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.activation = get_activation("gelu")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.layer_norm(self.activation(self.dense(hidden_states))))


class RobertaClassificationHead(nn.Module):
    """The ``<s>`` token's state through dropout, ``dense``, tanh, dropout and ``out_proj``."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        first = self.dropout(hidden_states[:, 0])
        return self.out_proj(self.dropout(torch.tanh(self.dense(first))))


class RobertaPreTrainedModel(EncoderPreTrainedMixin, PreTrainedModel):
    config_class = RobertaConfig
    base_model_prefix = "roberta"
    input_error = RobertaInputError
    output_bias_head = "lm_head"
    _no_split_modules: ClassVar[list[str]] = ["RobertaEmbeddings", "RobertaLayer"]
    # Checkpoints saved by heads without a pooler (e.g. RobertaForMaskedLM) load into models that have one.
    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = [r"(^|\.)pooler\."]
    # Older exporters saved the position/token-type id buffers, and tied files may repeat the MLM bias.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        r"embeddings\.position_ids$",
        r"embeddings\.token_type_ids$",
        r"lm_head\.decoder\.bias$",
    ]

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, RobertaLMHead):
            nn.init.zeros_(module.bias)


class RobertaModel(EncoderModelMixin, RobertaPreTrainedModel):
    """The encoder (and, unless ``add_pooling_layer=False``, the pooler).

    Returns ``BaseModelOutputWithPoolingAndCrossAttentions``; ``hidden_states`` holds the embedding
    output and every layer's output (``num_hidden_layers + 1`` tensors).
    """

    def __init__(self, config: RobertaConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self._build_encoder(RobertaEmbeddings(config), add_pooling_layer, RobertaLayer)
        self.post_init()


RobertaPreTrainedModel.base_model_class = RobertaModel


class RobertaForMaskedLM(EncoderForMaskedLM, RobertaPreTrainedModel):
    """Encoder plus the masked-language-model head; ``labels`` of ``-100`` are not scored."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.roberta = self._backbone(add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head.decoder

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head.decoder = value

    def _mlm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden_states)


class RobertaForSequenceClassification(EncoderForSequenceClassification, RobertaPreTrainedModel):
    """``<s>`` token -> ``classifier`` (dense, tanh, out_proj); the loss follows ``config.problem_type``."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = self._backbone(add_pooling_layer=False)
        self.classifier = RobertaClassificationHead(config)
        self.post_init()

    def _logits(self, encoded: Any) -> torch.Tensor:
        return self.classifier(encoded.last_hidden_state)


class RobertaForTokenClassification(EncoderForTokenClassification, RobertaPreTrainedModel):
    """Per-token linear classifier (NER and friends); ``labels`` of ``-100`` are not scored."""


class RobertaForQuestionAnswering(EncoderForQuestionAnswering, RobertaPreTrainedModel):
    """Extractive QA: per-token start and end logits (``qa_outputs`` has ``num_labels`` = 2 outputs)."""

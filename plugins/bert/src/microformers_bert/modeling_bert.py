"""BERT encoder and its task heads.

Parameter names equal the checkpoint tensor names of the reference implementation
(``bert.embeddings.word_embeddings.weight``, ``bert.encoder.layer.{i}.attention.self.query.weight``,
``bert.encoder.layer.{i}.output.LayerNorm.weight``, ``bert.pooler.dense.weight``,
``cls.predictions.transform.dense.weight``, ``cls.predictions.bias``, ``cls.seq_relationship.weight``,
``classifier.weight``, ``qa_outputs.weight``), so files load and save without renaming; the legacy
``LayerNorm.gamma`` / ``LayerNorm.beta`` spelling of old TF-converted files is renamed on load.

One forward pass: word + token type + absolute position embeddings and a LayerNorm, then post-norm
encoder layers (bidirectional self-attention through the configured attention kernel, residual and
LayerNorm; GELU MLP, residual and LayerNorm), then the pooler (tanh of a dense layer on the first
token) where the head uses it. The layers, the base model's ``forward`` and the token classification and
QA heads are the SDK's (``microformers_sdk.encoder``), shared with RoBERTa; this file adds BERT's
pre-training heads (masked LM, next sentence prediction) and its pooled classifier.
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
    EncoderHeadMixin,
    EncoderLabelledHead,
    EncoderLayer,
    EncoderModelMixin,
    EncoderPreTrainedMixin,
    classifier_dropout,
)
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import token_cross_entropy
from microformers_sdk.outputs import ModelOutput, NextSentencePredictorOutput
from microformers_sdk.weights import KeyRenamer

from .configuration_bert import BertConfig

__all__ = [
    "BertConfig",
    "BertForMaskedLM",
    "BertForNextSentencePrediction",
    "BertForPreTraining",
    "BertForPreTrainingOutput",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertInputError",
    "BertModel",
    "BertPreTrainedModel",
]

# Old TF-converted checkpoints spell LayerNorm parameters gamma/beta.
LEGACY_NAMES = KeyRenamer([(r"LayerNorm\.gamma$", "LayerNorm.weight"), (r"LayerNorm\.beta$", "LayerNorm.bias")])


class BertInputError(InputError):
    """The arguments of a forward call do not fit the model (missing inputs, too long, wrong shapes)."""


class BertForPreTrainingOutput(ModelOutput):
    loss: Any
    prediction_logits: Any
    seq_relationship_logits: Any
    hidden_states: Any
    attentions: Any


class BertEmbeddings(EncoderEmbeddings):
    """Word, token type and absolute position embeddings, summed and normalised."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(
            config.vocab_size, config.hidden_size, config.max_position_embeddings, config.type_vocab_size,
            config.layer_norm_eps, config.hidden_dropout_prob, config.pad_token_id, error=BertInputError,
        )  # fmt: skip


class BertLayer(EncoderLayer):
    """Post-norm block: ``norm(x + attn(x))`` then ``norm(x + mlp(x))`` (the SDK's, under BERT's name)."""


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = get_activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class BertLMPredictionHead(nn.Module):
    """Transform, then project onto the vocabulary with the (tied) word embeddings and an output bias.

    With ``tie_word_embeddings`` the decoder's weight is the word embedding matrix and its bias is
    ``cls.predictions.bias`` (the only one saved); untied, ``decoder.weight`` and ``decoder.bias`` are
    the decoder's own, and ``cls.predictions.bias`` is kept only so that files keep their layout.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=True)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertOnlyNSPHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertPreTrainedModel(EncoderPreTrainedMixin, PreTrainedModel):
    config_class = BertConfig
    base_model_prefix = "bert"
    input_error = BertInputError
    output_bias_head = "cls.predictions"
    legacy_names = LEGACY_NAMES
    _no_split_modules: ClassVar[list[str]] = ["BertLayer"]
    # Checkpoints saved by heads without a pooler (e.g. BertForMaskedLM) load into models that have one.
    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = [r"(^|\.)pooler\."]
    # Older exporters saved the position/token-type id buffers, and tied files may repeat the MLM bias.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        r"embeddings\.position_ids$",
        r"embeddings\.token_type_ids$",
        r"cls\.predictions\.decoder\.bias$",
    ]

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, BertLMPredictionHead):
            nn.init.zeros_(module.bias)


class BertModel(EncoderModelMixin, BertPreTrainedModel):
    """The encoder (and, unless ``add_pooling_layer=False``, the pooler).

    Returns ``BaseModelOutputWithPoolingAndCrossAttentions``; ``hidden_states`` holds the embedding
    output and every layer's output (``num_hidden_layers + 1`` tensors).
    """

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self._build_encoder(BertEmbeddings(config), add_pooling_layer, BertLayer)
        self.post_init()


BertPreTrainedModel.base_model_class = BertModel


class BertForMaskedLM(EncoderForMaskedLM, BertPreTrainedModel):
    """Encoder plus the masked-language-model head; ``labels`` of ``-100`` are not scored."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.cls.predictions.decoder = value

    def _mlm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.cls.predictions(hidden_states)


class BertForNextSentencePrediction(EncoderLabelledHead, BertPreTrainedModel):
    """Encoder, pooler and the two-way "is sentence B the continuation of A" classifier."""

    output_class = NextSentencePredictorOutput

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertOnlyNSPHead(config)
        self.post_init()

    def _logits(self, encoded: Any) -> torch.Tensor:
        return self.cls.seq_relationship(encoded.pooler_output)


class BertForPreTraining(EncoderHeadMixin, BertPreTrainedModel):
    """Encoder with both pre-training heads (masked LM and next sentence prediction)."""

    _tied_weights_keys: ClassVar[dict[str, str]] = BertForMaskedLM._tied_weights_keys

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.cls.predictions.decoder

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BertForPreTrainingOutput | tuple[Any, ...]:
        encoded = self._encode_bert_style(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, kwargs,
        )  # fmt: skip
        prediction_logits = self.cls.predictions(encoded.last_hidden_state)
        relationship_logits = self.cls.seq_relationship(encoded.pooler_output)
        loss = None
        if labels is not None and next_sentence_label is not None:
            masked_lm = token_cross_entropy(prediction_logits, labels)
            loss = masked_lm + token_cross_entropy(relationship_logits, next_sentence_label)
        output = BertForPreTrainingOutput(
            loss=loss,
            prediction_logits=prediction_logits,
            seq_relationship_logits=relationship_logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._finish(output, return_dict)


class BertForSequenceClassification(EncoderForSequenceClassification, BertPreTrainedModel):
    """Pooled [CLS] state, dropout and a linear classifier; the loss follows ``config.problem_type``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _logits(self, encoded: Any) -> torch.Tensor:
        return self.classifier(self.dropout(encoded.pooler_output))


class BertForTokenClassification(EncoderForTokenClassification, BertPreTrainedModel):
    """Per-token linear classifier (NER and friends); ``labels`` of ``-100`` are not scored."""


class BertForQuestionAnswering(EncoderForQuestionAnswering, BertPreTrainedModel):
    """Extractive QA: per-token start and end logits (``qa_outputs`` has ``num_labels`` = 2 outputs)."""

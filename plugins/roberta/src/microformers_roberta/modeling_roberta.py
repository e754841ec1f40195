"""RoBERTa encoder and its task heads, derived from BERT's (``microformers_bert.modeling_bert``).

RoBERTa is BERT's encoder: the same layers, encoder loop, pooler and base-model ``forward``, imported from
the ``microformers_bert`` package (plugins use each other through package exports only). This file subclasses BERT's classes and overrides only what RoBERTa
changes:

1. ``RobertaEmbeddings(BertEmbeddings)``: positions count from the padding index. A token's position id is
   ``padding_idx`` + its rank among the row's non-padding tokens (padding tokens get ``padding_idx`` itself),
   so left and right padding give the real tokens the same positions; from ``inputs_embeds`` the ids run
   ``padding_idx + 1, padding_idx + 2, ...``. The position table's ``padding_idx`` row stays zero.
2. ``RobertaModel(BertModel)``: built with those embeddings and stored under the ``roberta.`` prefix; its
   errors are ``RobertaInputError`` (a ``BertInputError``).
3. The masked-LM head is ``lm_head``: ``decoder(layer_norm(gelu(dense(h))))`` (BERT's is ``cls.predictions``).
4. The sequence classifier reads the first (``<s>``) token, without the pooler:
   ``classifier.out_proj(dropout(tanh(classifier.dense(dropout(h[:, 0])))))``.

5. The multiple-choice head reads the pooled ``<s>`` state through ``dropout`` (``hidden_dropout_prob``) and a
   one-output ``classifier``; the causal LM (``RobertaForCausalLM``, ``is_decoder=True``) is BERT's decoder with
   the ``lm_head``.

Token classification and question answering are BERT's heads unchanged (their ``forward`` reaches the
encoder through ``bert``, here an alias of ``roberta``); only their ``__init__`` differs, to build
``RobertaModel`` under ``roberta``.

Parameter names equal the checkpoint tensor names of the reference implementation
(``roberta.embeddings.word_embeddings.weight``, ``roberta.embeddings.position_embeddings.weight``,
``roberta.embeddings.token_type_embeddings.weight``, ``roberta.encoder.layer.{i}.attention.self.query.weight``,
``roberta.encoder.layer.{i}.attention.output.dense.weight``, ``...intermediate.dense``, ``...output.LayerNorm``,
``roberta.pooler.dense.weight``; heads: ``lm_head.dense``, ``lm_head.layer_norm``, ``lm_head.decoder``
(tied to the word embeddings), ``lm_head.bias``, ``classifier.dense``, ``classifier.out_proj``,
``classifier.weight`` (token classification), ``qa_outputs.weight``), so files load and save without renaming.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers import logging
from microformers_bert import (
    BertEmbeddings,
    BertEncoder,
    BertForQuestionAnswering,
    BertForTokenClassification,
    BertInputError,
    BertModel,
    BertPooler,
    BertPreTrainedModel,
)
from microformers_sdk.cache import Cache
from microformers_sdk.decoder_heads import keep_logits_positions
from microformers_sdk.encoder import (
    check_one_input,
    classifier_dropout,
    flatten_choices,
    mirror_output_bias,
    multiple_choice_output,
    prune_model_heads,
    require_two_labels,
)
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import causal_lm_loss, sequence_classification_loss, token_cross_entropy
from microformers_sdk.outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    SequenceClassifierOutput,
)

from .configuration_roberta import RobertaConfig

__all__ = [
    "RobertaConfig",
    "RobertaForCausalLM",
    "RobertaForMaskedLM",
    "RobertaForMultipleChoice",
    "RobertaForQuestionAnswering",
    "RobertaForSequenceClassification",
    "RobertaForTokenClassification",
    "RobertaInputError",
    "RobertaModel",
    "RobertaPreTrainedModel",
    "create_position_ids_from_input_ids",
]


logger = logging.get_logger(__name__)


class RobertaInputError(BertInputError):
    """The arguments of a forward call do not fit the model (missing inputs, too long, wrong shapes)."""


def create_position_ids_from_input_ids(
    input_ids: torch.Tensor, padding_idx: int, past_key_values_length: int = 0
) -> torch.Tensor:
    """``padding_idx`` + the running count of non-padding tokens (after ``past_key_values_length`` cached ones);
    padding tokens keep ``padding_idx``."""
    real = input_ids.ne(padding_idx).long()
    return (torch.cumsum(real, dim=1) + past_key_values_length) * real + padding_idx


# -- embeddings: BERT's, with positions that start after the padding index -----------------------------
class RobertaEmbeddings(BertEmbeddings):
    """BERT's word, token type and position embeddings; default positions start after ``pad_token_id``."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=self.padding_idx
        )

    def default_position_ids(
        self, input_ids: torch.Tensor | None, inputs: torch.Tensor, past_length: int = 0
    ) -> torch.Tensor:
        """Position ids from ``input_ids`` when given, else ``padding_idx + 1 ..`` over ``inputs`` (ids or embeddings:
        only its length and device are read), after ``past_length`` tokens a decoder has cached; raises when the
        input does not fit the position table."""
        length = past_length + inputs.shape[1]
        limit = self.position_embeddings.num_embeddings
        if length + self.padding_idx >= limit:
            raise RobertaInputError(
                f"the input reaches {length} tokens but this model takes at most {limit - self.padding_idx - 1} "
                f"(max_position_embeddings={limit} less the padding index {self.padding_idx} + 1, where "
                "positions start); truncate the input (e.g. tokenizer(..., truncation=True))"
            )
        if input_ids is not None:
            return create_position_ids_from_input_ids(input_ids, self.padding_idx, past_length)
        first = self.padding_idx + 1 + past_length
        return torch.arange(first, first + inputs.shape[1], device=inputs.device).unsqueeze(0)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        past_length: int = 0,
    ) -> torch.Tensor:
        if position_ids is None:
            inputs = inputs_embeds if inputs_embeds is not None else input_ids
            position_ids = self.default_position_ids(input_ids, inputs, past_length)
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_length)


# -- heads RoBERTa has in its own shape ----------------------------------------------------------------
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


# -- pre-trained base class: BERT's, under the ``roberta`` prefix --------------------------------------
class RobertaPreTrainedModel(BertPreTrainedModel):
    """BERT's base class (weight init, decoder settings refused, head pruning, gamma/beta renaming) with
    RoBERTa's prefix, its masked-LM bias under ``lm_head`` and its own input error."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"
    base_model_class: ClassVar[type[RobertaModel]]  # XLM-R's heads name theirs
    _no_split_modules: ClassVar[list[str]] = ["RobertaEmbeddings", "BertLayer"]
    # Older exporters saved the position/token-type id buffers, and tied files may repeat the MLM bias.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        r"embeddings\.position_ids$",
        r"embeddings\.token_type_ids$",
        r"lm_head\.decoder\.bias$",
    ]
    config: RobertaConfig

    @property
    def bert(self) -> RobertaModel:
        """BERT's head ``forward``s call ``self.bert``; RoBERTa keeps that encoder under ``roberta``."""
        return self.roberta

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, RobertaLMHead):
            nn.init.zeros_(module.bias)

    def prune_heads(self, heads_to_prune: dict[int, list[int]]) -> None:
        """Remove attention heads (``{layer: [head, ...]}``, original indices); recorded in ``config.pruned_heads``."""
        prune_model_heads(self, heads_to_prune, RobertaInputError)

    def _checkpoint_key_map(self, checkpoint_keys: set[str]) -> dict[str, str]:
        # A file holding the MLM output bias under only one of its two ``lm_head`` names fills both.
        renamed = mirror_output_bias({key: key for key in checkpoint_keys}, "lm_head")
        mapping = super()._checkpoint_key_map(set(renamed))
        return {name: renamed[key] for name, key in mapping.items()}


# -- base model: BERT's, with RoBERTa's embeddings -----------------------------------------------------
class RobertaModel(RobertaPreTrainedModel, BertModel):
    """The encoder (and, unless ``add_pooling_layer=False``, the pooler); BERT's ``forward``.

    Returns ``BaseModelOutputWithPoolingAndCrossAttentions``; ``hidden_states`` holds the embedding
    output and every layer's output (``num_hidden_layers + 1`` tensors).
    """

    def __init__(self, config: RobertaConfig, add_pooling_layer: bool = True) -> None:
        # Not BertModel.__init__, which builds BERT's embeddings: the same modules with RoBERTa's embeddings.
        RobertaPreTrainedModel.__init__(self, config)
        self.embeddings = RobertaEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self._prune_heads(getattr(config, "pruned_heads", None) or {})
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        head_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions | tuple[Any, ...]:
        """BERT's ``forward``; its input errors are raised as ``RobertaInputError``."""
        try:
            return super().forward(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                output_hidden_states, return_dict, head_mask, past_key_values, use_cache, **kwargs,
            )  # fmt: skip
        except BertInputError as error:
            if isinstance(error, RobertaInputError):
                raise
            raise RobertaInputError(*error.args) from None


RobertaPreTrainedModel.base_model_class = RobertaModel


# -- heads ---------------------------------------------------------------------------------------------
class RobertaForMaskedLM(RobertaPreTrainedModel):
    """Encoder plus the masked-language-model head ``lm_head``; ``labels`` of ``-100`` are not scored."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head.decoder

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head.decoder = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        head_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> MaskedLMOutput | tuple[Any, ...]:
        encoded = self.roberta(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        logits = self.lm_head(encoded.last_hidden_state)
        output = MaskedLMOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class RobertaForCausalLM(RobertaPreTrainedModel):
    """RoBERTa as a left-to-right language model (``is_decoder=True``: causal self-attention with a KV cache)
    under the masked-LM head ``lm_head``; ``labels`` are the input ids, scored one position ahead."""

    _tied_weights_keys: ClassVar[dict[str, str]] = RobertaForMaskedLM._tied_weights_keys

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        if not config.is_decoder:
            logger.warning(f"{type(self).__name__} is meant as a decoder: set is_decoder=True in the config")
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head.decoder

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head.decoder = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        head_mask: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithCrossAttentions | tuple[Any, ...]:
        """``logits_to_keep=n`` computes logits for the last ``n`` positions only (0: all); with ``labels`` no cache."""
        for name in ("encoder_hidden_states", "encoder_attention_mask"):
            if kwargs.get(name) is not None:
                raise RobertaInputError(
                    f"{name} needs cross-attention layers (add_cross_attention=True), which microformers-roberta "
                    f"does not provide; {type(self).__name__} runs as a decoder-only language model"
                )
        if labels is not None:
            use_cache = False
        encoded = self.roberta(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask, past_key_values=past_key_values,
            use_cache=use_cache,
        )  # fmt: skip
        logits = self.lm_head(keep_logits_positions(encoded.last_hidden_state, logits_to_keep))
        output = CausalLMOutputWithCrossAttentions(
            loss=causal_lm_loss(logits, labels, kwargs.get("num_items_in_batch")) if labels is not None else None,
            logits=logits,
            past_key_values=encoded.past_key_values,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class RobertaForSequenceClassification(RobertaPreTrainedModel):
    """``<s>`` token -> ``classifier`` (dense, tanh, out_proj); the loss follows ``config.problem_type``."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.classifier = RobertaClassificationHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        head_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput | tuple[Any, ...]:
        encoded = self.roberta(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        logits = self.classifier(encoded.last_hidden_state)
        output = SequenceClassifierOutput(
            loss=sequence_classification_loss(logits, labels, self.config) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class RobertaForTokenClassification(RobertaPreTrainedModel, BertForTokenClassification):
    """BERT's per-token linear classifier (NER and friends) over ``roberta``; ``labels`` of ``-100`` are not scored."""

    def __init__(self, config: RobertaConfig) -> None:
        # Not BertForTokenClassification.__init__, which builds a BertModel under ``bert``.
        RobertaPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class RobertaForQuestionAnswering(RobertaPreTrainedModel, BertForQuestionAnswering):
    """BERT's extractive QA head over ``roberta``: per-token start and end logits (``num_labels`` = 2)."""

    def __init__(self, config: RobertaConfig) -> None:
        # Not BertForQuestionAnswering.__init__, which builds a BertModel under ``bert``.
        require_two_labels(config, type(self).__name__)
        RobertaPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class RobertaForMultipleChoice(RobertaPreTrainedModel):
    """Scores each of ``num_choices`` candidate sequences per example: pooled ``<s>`` state, ``dropout``
    (``hidden_dropout_prob``) and a one-output ``classifier``; inputs are ``(batch, num_choices, length)``."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.roberta = self.base_model_class(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        head_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> MultipleChoiceModelOutput | tuple[Any, ...]:
        """``hidden_states`` / ``attentions`` come back per choice row (``batch * num_choices`` rows)."""
        check_one_input(self, input_ids, inputs_embeds, RobertaInputError)
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        encoded = self.roberta(
            flatten_choices(input_ids, "input_ids", RobertaInputError),
            flatten_choices(attention_mask, "attention_mask", RobertaInputError),
            flatten_choices(token_type_ids, "token_type_ids", RobertaInputError),
            flatten_choices(position_ids, "position_ids", RobertaInputError),
            flatten_choices(inputs_embeds, "inputs_embeds", RobertaInputError),
            output_attentions, output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        scores = self.classifier(self.dropout(encoded.pooler_output))
        return self._returned(multiple_choice_output(scores, num_choices, labels, encoded), return_dict)

"""DistilBERT encoder and its task heads, written out top to bottom.

Reading order: embeddings, multi-head self-attention, FFN, transformer block, transformer, the
pre-trained base class, the base model's ``forward``, then the task heads. The configuration is
``DistilBertConfig`` in ``configuration_distilbert.py``. From the SDK this file takes only building
blocks: the attention functions (``config._attn_implementation``: ``sdpa``, ``eager`` or a registered one),
the padding-mask helper, activations, output dataclasses, losses and small head helpers; every
``forward`` is here.

Parameter names equal the checkpoint tensor names of the reference implementation
(``distilbert.embeddings.word_embeddings.weight``, ``distilbert.transformer.layer.{i}.attention.q_lin.weight``,
``...sa_layer_norm``, ``...ffn.lin1``, ``...output_layer_norm``; heads: ``vocab_transform``,
``vocab_layer_norm``, ``vocab_projector`` (tied to the word embeddings), ``pre_classifier``,
``classifier``, ``qa_outputs``), so files load and save without renaming.

One forward pass: word + absolute position embeddings (learned, or sinusoidal at initialisation with
``sinusoidal_pos_embds``) and a LayerNorm, then post-norm blocks: bidirectional self-attention through
the configured attention kernel, residual and LayerNorm; the ``lin1``/activation/``lin2`` MLP, residual
and LayerNorm. There are no token type embeddings and no pooler: classification reads the first token.

Supported: ``output_attentions`` / ``output_hidden_states``, gradient checkpointing, sinusoidal or
learned positions, feed-forward chunking (``chunk_size_feed_forward``: the FFN runs on that many positions at
a time, same outputs, less peak memory). ``head_mask`` is refused (the reference takes none) and heads cannot be pruned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import InputError
from microformers.outputs import ModelOutput
from microformers_sdk.attention import AttentionFunction, eager_attention, get_attention_function
from microformers_sdk.encoder import (
    check_one_input,
    flatten_choices,
    multiple_choice_output,
    question_answering_output,
    require_two_labels,
)
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import sequence_classification_loss, token_cross_entropy
from microformers_sdk.masks import build_attention_mask, capturing_graph
from microformers_sdk.outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from microformers_sdk.pytorch_utils import apply_chunking_to_forward

from .configuration_distilbert import DistilBertConfig

__all__ = [
    "DistilBertConfig",
    "DistilBertForMaskedLM",
    "DistilBertForMultipleChoice",
    "DistilBertForQuestionAnswering",
    "DistilBertForSequenceClassification",
    "DistilBertForTokenClassification",
    "DistilBertModel",
    "DistilBertPreTrainedModel",
]

LAYER_NORM_EPS = 1e-12  # fixed in DistilBERT, not a config setting

# What a block returns: its hidden states and, with ``output_attentions``, its attention probabilities.
LayerOutput = tuple[torch.Tensor, torch.Tensor | None]


# -- embeddings ----------------------------------------------------------------------------------------
def sinusoidal_table(positions: int, dim: int) -> torch.Tensor:
    """``(positions, dim)``: sin on even, cos on odd columns, wavelengths ``10000 ** (2 * (j // 2) / dim)``."""
    position = torch.arange(positions, dtype=torch.float64).unsqueeze(1)
    exponent = torch.tensor([2 * (j // 2) / dim for j in range(dim)], dtype=torch.float64)
    angles = position / torch.pow(torch.tensor(10000.0, dtype=torch.float64), exponent)
    table = torch.empty(positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles[:, 0::2])
    table[:, 1::2] = torch.cos(angles[:, 1::2])
    return table.float()


class DistilBertEmbeddings(nn.Module):
    """Word and absolute position embeddings, summed, normalised and dropped out (no token types).

    Default position ids are ``0 .. length - 1``. The sinusoidal table, when configured, is written by
    ``DistilBertPreTrainedModel._init_weights``.
    """

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim, padding_idx=padding_idx)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.LayerNorm = nn.LayerNorm(config.dim, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        length = inputs_embeds.shape[1]
        positions = self.position_embeddings.num_embeddings
        if position_ids is None:
            if length > positions:
                raise InputError(
                    f"the input has {length} tokens but this model has max_position_embeddings={positions}; "
                    "truncate the input (e.g. tokenizer(..., truncation=True, max_length=...))"
                )
            position_ids = torch.arange(length, device=inputs_embeds.device).unsqueeze(0)
        elif not capturing_graph() and (  # no data branch in traced or exported graphs
            bool((position_ids >= positions).any()) or bool((position_ids < 0).any())
        ):
            raise InputError(f"position_ids must lie in [0, {positions}) (max_position_embeddings)")
        embeddings = inputs_embeds + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


# -- attention -----------------------------------------------------------------------------------------
class DistilBertSelfAttention(nn.Module):
    """Bidirectional multi-head attention: ``q_lin``, ``k_lin`` and ``v_lin`` in, the attention kernel, ``out_lin`` out."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.num_heads = config.n_heads
        self.head_dim = config.dim // config.n_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.q_lin = nn.Linear(config.dim, config.dim)
        self.k_lin = nn.Linear(config.dim, config.dim)
        self.v_lin = nn.Linear(config.dim, config.dim)
        self.out_lin = nn.Linear(config.dim, config.dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> LayerOutput:
        batch, length, _ = hidden_states.shape
        split = (batch, length, self.num_heads, self.head_dim)  # -> (batch, heads, length, head_dim)
        query = self.q_lin(hidden_states).view(split).transpose(1, 2)
        key = self.k_lin(hidden_states).view(split).transpose(1, 2)
        value = self.v_lin(hidden_states).view(split).transpose(1, 2)
        dropout = self.attention_dropout if self.training else 0.0

        weights = None
        if output_attentions:  # only the eager kernel can hand back the probabilities
            context, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, return_weights=True
            )
        else:
            context = attention_fn(query, key, value, attention_mask, scaling=self.scaling, dropout=dropout)
        return self.out_lin(context.transpose(1, 2).reshape(batch, length, -1)), weights


# -- MLP -----------------------------------------------------------------------------------------------
class DistilBertFFN(nn.Module):
    """``dropout(lin2(activation(lin1(x))))`` through ``hidden_dim`` (``activation``, GELU for DistilBERT),
    ``chunk_size_feed_forward`` positions at a time when that is > 0."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.lin1 = nn.Linear(config.dim, config.hidden_dim)
        self.lin2 = nn.Linear(config.hidden_dim, config.dim)
        self.activation = get_activation(config.activation, setting="activation")
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return apply_chunking_to_forward(self.chunk, self.chunk_size_feed_forward, 1, hidden_states)

    def chunk(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.lin2(self.activation(self.lin1(hidden_states))))


# -- block, transformer --------------------------------------------------------------------------------
class DistilBertBlock(nn.Module):
    """Post-norm block: ``sa_layer_norm(x + attn(x))`` then ``output_layer_norm(x + ffn(x))``."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.attention = DistilBertSelfAttention(config)
        self.sa_layer_norm = nn.LayerNorm(config.dim, eps=LAYER_NORM_EPS)
        self.ffn = DistilBertFFN(config)
        self.output_layer_norm = nn.LayerNorm(config.dim, eps=LAYER_NORM_EPS)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> LayerOutput:
        attended, weights = self.attention(hidden_states, attention_mask, attention_fn, output_attentions)
        attended = self.sa_layer_norm(attended + hidden_states)
        return self.output_layer_norm(self.ffn(attended) + attended), weights


def _call(layer: nn.Module, *args: Any) -> Any:
    return layer(*args)


class DistilBertTransformer(nn.Module):
    """``n_layers`` blocks run in turn, collecting every hidden state (embeddings first) and attention."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(DistilBertBlock(config) for _ in range(config.n_layers))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        call_layer: Callable[..., Any] = _call,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """``call_layer(layer, *args)`` runs one block; the model passes its own so gradient checkpointing applies."""
        all_hidden_states = [hidden_states]
        all_attentions = []
        for layer in self.layer:
            hidden_states, weights = call_layer(layer, hidden_states, attention_mask, attention_fn, output_attentions)
            all_hidden_states.append(hidden_states)
            if output_attentions:
                all_attentions.append(weights)
        return hidden_states, tuple(all_hidden_states), tuple(all_attentions)


# -- pre-trained base class ----------------------------------------------------------------------------
class DistilBertPreTrainedModel(PreTrainedModel):
    """Weight init (the sinusoidal position table) and what ``DistilBertModel`` and every head share."""

    config_class = DistilBertConfig
    base_model_prefix = "distilbert"
    _no_split_modules: ClassVar[list[str]] = ["DistilBertBlock"]
    supports_gradient_checkpointing = True
    # Older exporters saved the position id buffer.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"embeddings\.position_ids$"]
    config: DistilBertConfig

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, DistilBertEmbeddings) and self.config.sinusoidal_pos_embds:
            weight = module.position_embeddings.weight
            with torch.no_grad():
                weight.copy_(sinusoidal_table(weight.shape[0], weight.shape[1]).to(weight.dtype))

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.base_model.set_input_embeddings(value)

    def _returned(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


# -- base model ----------------------------------------------------------------------------------------
class DistilBertModel(DistilBertPreTrainedModel):
    """The encoder; returns ``BaseModelOutput`` (``hidden_states``: embeddings plus every layer's output)."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.embeddings = DistilBertEmbeddings(config)
        self.transformer = DistilBertTransformer(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.word_embeddings = value

    def get_position_embeddings(self) -> nn.Embedding:
        return self.embeddings.position_embeddings

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutput | tuple[Any, ...]:
        """``attention_mask`` is the tokenizer's ``(batch, length)`` 0/1 mask or a ready-made 4-D one."""
        if kwargs.get("head_mask") is not None:
            raise InputError(f"{type(self).__name__} does not take head_mask (the reference does not either)")
        config = self.config
        check_one_input(self, input_ids, inputs_embeds)
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states

        hidden_states = self.embeddings(input_ids, position_ids, inputs_embeds)
        length = hidden_states.shape[1]
        if attention_mask is not None and attention_mask.dim() == 2 and attention_mask.shape[-1] != length:
            raise InputError(
                f"attention_mask has {attention_mask.shape[-1]} columns but the input has {length} tokens; "
                "pass the mask the tokenizer returned with these input_ids"
            )
        mask, _ = build_attention_mask(attention_mask, length, 0, causal=False, device=hidden_states.device)
        hidden_states, all_hidden_states, all_attentions = self.transformer(
            hidden_states, mask, get_attention_function(config), output_attentions, self._call_layer
        )
        output = BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden_states if output_hidden_states else None,
            attentions=all_attentions if output_attentions else None,
        )
        return self._returned(output, return_dict)


# -- heads ---------------------------------------------------------------------------------------------
class DistilBertForMaskedLM(DistilBertPreTrainedModel):
    """Encoder, then ``vocab_projector(norm(act(vocab_transform(h))))``; ``labels`` of ``-100`` are not scored."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "vocab_projector.weight": "distilbert.embeddings.word_embeddings.weight"
    }

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.distilbert = DistilBertModel(config)
        self.activation = get_activation(config.activation, setting="activation")
        self.vocab_transform = nn.Linear(config.dim, config.dim)
        self.vocab_layer_norm = nn.LayerNorm(config.dim, eps=LAYER_NORM_EPS)
        self.vocab_projector = nn.Linear(config.dim, config.vocab_size)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.vocab_projector

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.vocab_projector = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> MaskedLMOutput | tuple[Any, ...]:
        encoded = self.distilbert(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states,
            return_dict=True, **kwargs,
        )  # fmt: skip
        hidden = self.vocab_layer_norm(self.activation(self.vocab_transform(encoded.last_hidden_state)))
        logits = self.vocab_projector(hidden)
        output = MaskedLMOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class DistilBertForSequenceClassification(DistilBertPreTrainedModel):
    """First token -> ``pre_classifier`` -> ReLU -> dropout -> ``classifier``; the loss follows ``problem_type``."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.distilbert = DistilBertModel(config)
        self.num_labels = config.num_labels
        self.pre_classifier = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, config.num_labels)
        self.dropout = nn.Dropout(config.seq_classif_dropout)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput | tuple[Any, ...]:
        encoded = self.distilbert(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states,
            return_dict=True, **kwargs,
        )  # fmt: skip
        pooled = torch.relu(self.pre_classifier(encoded.last_hidden_state[:, 0]))
        logits = self.classifier(self.dropout(pooled))
        output = SequenceClassifierOutput(
            loss=sequence_classification_loss(logits, labels, self.config) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class DistilBertForTokenClassification(DistilBertPreTrainedModel):
    """One ``classifier`` label per token (after dropout); ``labels`` of ``-100`` are not scored."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.distilbert = DistilBertModel(config)
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.dim, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[Any, ...]:
        encoded = self.distilbert(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states,
            return_dict=True, **kwargs,
        )  # fmt: skip
        logits = self.classifier(self.dropout(encoded.last_hidden_state))
        output = TokenClassifierOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class DistilBertForQuestionAnswering(DistilBertPreTrainedModel):
    """Start and end logits per token (``qa_outputs``, after dropout); the loss averages both span losses."""

    def __init__(self, config: DistilBertConfig) -> None:
        require_two_labels(config, "DistilBertForQuestionAnswering")
        super().__init__(config)
        self.distilbert = DistilBertModel(config)
        self.dropout = nn.Dropout(config.qa_dropout)
        self.qa_outputs = nn.Linear(config.dim, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> QuestionAnsweringModelOutput | tuple[Any, ...]:
        """Start and end logits per token; the span loss when both positions are given."""
        encoded = self.distilbert(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states,
            return_dict=True, **kwargs,
        )  # fmt: skip
        logits = self.qa_outputs(self.dropout(encoded.last_hidden_state))
        output = question_answering_output(logits, start_positions, end_positions, encoded)
        return self._returned(output, return_dict)


class DistilBertForMultipleChoice(DistilBertPreTrainedModel):
    """Scores each of ``num_choices`` candidate sequences per example: first token -> ``pre_classifier`` -> ReLU
    -> dropout -> one-output ``classifier``; inputs are ``(batch, num_choices, length)``."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.distilbert = DistilBertModel(config)
        self.pre_classifier = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, 1)
        self.dropout = nn.Dropout(config.seq_classif_dropout)
        self.post_init()

    def get_position_embeddings(self) -> nn.Embedding:
        return self.distilbert.get_position_embeddings()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> MultipleChoiceModelOutput | tuple[Any, ...]:
        """``hidden_states`` / ``attentions`` come back per choice row (``batch * num_choices`` rows)."""
        check_one_input(self, input_ids, inputs_embeds)
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        encoded = self.distilbert(
            flatten_choices(input_ids, "input_ids"),
            flatten_choices(attention_mask, "attention_mask"),
            flatten_choices(position_ids, "position_ids"),
            flatten_choices(inputs_embeds, "inputs_embeds"),
            output_attentions, output_hidden_states, return_dict=True, **kwargs,
        )  # fmt: skip
        pooled = torch.relu(self.pre_classifier(encoded.last_hidden_state[:, 0]))
        scores = self.classifier(self.dropout(pooled))
        return self._returned(multiple_choice_output(scores, num_choices, labels, encoded), return_dict)

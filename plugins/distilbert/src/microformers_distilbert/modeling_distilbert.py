"""DistilBERT encoder and its task heads.

Parameter names equal the checkpoint tensor names of the reference implementation
(``distilbert.embeddings.word_embeddings.weight``, ``distilbert.transformer.layer.{i}.attention.q_lin.weight``,
``...sa_layer_norm``, ``...ffn.lin1``, ``...output_layer_norm``; heads: ``vocab_transform``,
``vocab_layer_norm``, ``vocab_projector`` (tied to the word embeddings), ``pre_classifier``,
``classifier``, ``qa_outputs``), so files load and save without renaming.

One forward pass: word + absolute position embeddings (learned, or sinusoidal at initialisation with
``sinusoidal_pos_embds``) and a LayerNorm, then post-norm blocks: bidirectional self-attention through
the configured attention kernel, residual and LayerNorm; the ``lin1``/activation/``lin2`` MLP, residual
and LayerNorm. There are no token type embeddings and no pooler: classification reads the first token.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import ConfigError, InputError
from microformers_sdk.attention import eager_attention, get_attention_function
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import sequence_classification_loss, span_loss, token_cross_entropy
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    ModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from .configuration_distilbert import DistilBertConfig

__all__ = [
    "DistilBertConfig",
    "DistilBertForMaskedLM",
    "DistilBertForQuestionAnswering",
    "DistilBertForSequenceClassification",
    "DistilBertForTokenClassification",
    "DistilBertModel",
    "DistilBertPreTrainedModel",
]

LAYER_NORM_EPS = 1e-12  # fixed in DistilBERT, not a config setting


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
    """Word and absolute position embeddings, summed and normalised."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim, padding_idx=padding_idx)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.LayerNorm = nn.LayerNorm(config.dim, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, input_ids: torch.Tensor | None, position_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        length = inputs_embeds.shape[1]
        limit = self.position_embeddings.num_embeddings
        if position_ids is None:
            if length > limit:
                raise InputError(
                    f"the input has {length} tokens but this model has max_position_embeddings={limit}; "
                    "truncate the input (e.g. tokenizer(..., truncation=True, max_length=...))"
                )
            position_ids = torch.arange(length, device=inputs_embeds.device).unsqueeze(0)
        elif bool((position_ids >= limit).any()) or bool((position_ids < 0).any()):
            raise InputError(f"position_ids must lie in [0, {limit}) (max_position_embeddings)")
        return self.dropout(self.LayerNorm(inputs_embeds + self.position_embeddings(position_ids)))


class DistilBertSelfAttention(nn.Module):
    """Bidirectional multi-head attention: ``q_lin``/``k_lin``/``v_lin`` in, ``out_lin`` out."""

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
        attention_fn: Any,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape

        def heads(projection: nn.Linear) -> torch.Tensor:
            return projection(hidden_states).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        query, key, value = heads(self.q_lin), heads(self.k_lin), heads(self.v_lin)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions:
            output, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, return_weights=True
            )
        else:
            output = attention_fn(query, key, value, attention_mask, scaling=self.scaling, dropout=dropout)
        return self.out_lin(output.transpose(1, 2).reshape(batch, length, -1)), weights


class DistilBertFFN(nn.Module):
    """``dropout(lin2(activation(lin1(x))))``."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.lin1 = nn.Linear(config.dim, config.hidden_dim)
        self.lin2 = nn.Linear(config.hidden_dim, config.dim)
        self.activation = get_activation(config.activation, setting="activation")
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.lin2(self.activation(self.lin1(hidden_states))))


class DistilBertBlock(nn.Module):
    """Post-norm block: ``norm(x + attn(x))`` then ``norm(x + ffn(x))``."""

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
        attention_fn: Any,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.attention(hidden_states, attention_mask, attention_fn, output_attentions)
        attended = self.sa_layer_norm(attended + hidden_states)
        return self.output_layer_norm(self.ffn(attended) + attended), weights


class DistilBertTransformer(nn.Module):
    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(DistilBertBlock(config) for _ in range(config.n_layers))


class DistilBertPreTrainedModel(PreTrainedModel):
    config_class = DistilBertConfig
    base_model_prefix = "distilbert"
    _no_split_modules: ClassVar[list[str]] = ["DistilBertBlock"]
    supports_gradient_checkpointing = True
    # Older exporters saved the position id buffer.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"embeddings\.position_ids$"]

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, DistilBertEmbeddings) and self.config.sinusoidal_pos_embds:
            weight = module.position_embeddings.weight
            with torch.no_grad():
                weight.copy_(sinusoidal_table(weight.shape[0], weight.shape[1]).to(weight.dtype))


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
        if kwargs.get("head_mask") is not None:
            raise InputError(f"{type(self).__name__} does not take head_mask (the reference does not either)")
        if (input_ids is None) == (inputs_embeds is None):
            raise InputError(f"{type(self).__name__}.forward needs exactly one of input_ids or inputs_embeds")
        config = self.config
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = config.return_dict if return_dict is None else return_dict

        hidden_states = self.embeddings(input_ids, position_ids, inputs_embeds)
        length = hidden_states.shape[1]
        if attention_mask is not None and attention_mask.dim() == 2 and attention_mask.shape[-1] != length:
            raise InputError(
                f"attention_mask has {attention_mask.shape[-1]} columns but the input has {length} tokens; "
                "pass the mask the tokenizer returned with these input_ids"
            )
        mask, _ = build_attention_mask(attention_mask, length, 0, causal=False, device=hidden_states.device)
        attention_fn = get_attention_function(config)
        all_hidden_states: list[torch.Tensor] = [hidden_states]
        all_attentions: list[torch.Tensor] = []
        for layer in self.transformer.layer:
            hidden_states, weights = self._call_layer(layer, hidden_states, mask, attention_fn, output_attentions)
            all_hidden_states.append(hidden_states)
            if output_attentions:
                all_attentions.append(weights)
        output = BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
        )
        return output if return_dict else output.to_tuple()


class _DistilBertHead(DistilBertPreTrainedModel):
    """Shared plumbing of the heads: ``self.distilbert`` run with the caller's encoder arguments."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.distilbert = DistilBertModel(config)

    def get_input_embeddings(self) -> nn.Module:
        return self.distilbert.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.distilbert.embeddings.word_embeddings = value

    def _encode(self, **encoder_kwargs: Any) -> BaseModelOutput:
        return self.distilbert(**encoder_kwargs, return_dict=True)

    def _finish(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


class DistilBertForMaskedLM(_DistilBertHead):
    """Encoder, then ``vocab_projector(norm(act(vocab_transform(h))))``; ``labels`` of ``-100`` are not scored."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "vocab_projector.weight": "distilbert.embeddings.word_embeddings.weight"
    }

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
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
        encoded = self._encode(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs,
        )  # fmt: skip
        hidden = self.vocab_layer_norm(self.activation(self.vocab_transform(encoded.last_hidden_state)))
        logits = self.vocab_projector(hidden)
        loss = token_cross_entropy(logits, labels) if labels is not None else None
        output = MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return self._finish(output, return_dict)


class DistilBertForSequenceClassification(_DistilBertHead):
    """First token -> ``pre_classifier`` -> ReLU -> dropout -> ``classifier``; loss by ``problem_type``."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
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
        encoded = self._encode(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs,
        )  # fmt: skip
        pooled = torch.relu(self.pre_classifier(encoded.last_hidden_state[:, 0]))
        logits = self.classifier(self.dropout(pooled))
        loss = sequence_classification_loss(logits, labels, self.config) if labels is not None else None
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return self._finish(output, return_dict)


class DistilBertForTokenClassification(_DistilBertHead):
    """One ``classifier`` label per token (after dropout); ``labels`` of ``-100`` are not scored."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
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
        encoded = self._encode(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs,
        )  # fmt: skip
        logits = self.classifier(self.dropout(encoded.last_hidden_state))
        loss = token_cross_entropy(logits, labels) if labels is not None else None
        output = TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return self._finish(output, return_dict)


class DistilBertForQuestionAnswering(_DistilBertHead):
    """Start and end logits per token (``qa_outputs``, after dropout); the loss averages both span losses."""

    def __init__(self, config: DistilBertConfig) -> None:
        if config.num_labels != 2:
            raise ConfigError(
                f"num_labels={config.num_labels} for DistilBertForQuestionAnswering: the head predicts a start and "
                "an end logit per token, so num_labels must be 2; fix config.json (or drop num_labels/id2label)"
            )
        super().__init__(config)
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
        encoded = self._encode(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs,
        )  # fmt: skip
        logits = self.qa_outputs(self.dropout(encoded.last_hidden_state))
        start_logits, end_logits = (part.squeeze(-1).contiguous() for part in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        output = QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._finish(output, return_dict)

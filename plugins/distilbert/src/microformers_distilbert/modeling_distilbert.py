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
from microformers.errors import InputError
from microformers_sdk.encoder import (
    EncoderEmbeddings,
    EncoderHeadMixin,
    EncoderSelfAttention,
    check_one_input,
    labelled_output,
    question_answering_output,
    require_two_labels,
    run_encoder,
)
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import sequence_classification_loss, token_cross_entropy
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


class DistilBertEmbeddings(EncoderEmbeddings):
    """Word and absolute position embeddings, summed and normalised (no token types)."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(
            config.vocab_size, config.dim, config.max_position_embeddings, 0, LAYER_NORM_EPS, config.dropout,
            config.pad_token_id,
        )  # fmt: skip


def _self_attention(config: DistilBertConfig) -> EncoderSelfAttention:
    """Bidirectional multi-head attention: ``q_lin``/``k_lin``/``v_lin`` in, ``out_lin`` out."""
    return EncoderSelfAttention(
        config.dim, config.n_heads, config.attention_dropout, names=("q_lin", "k_lin", "v_lin"), output="out_lin"
    )


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
        self.attention = _self_attention(config)
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
        check_one_input(self, input_ids, inputs_embeds)
        config = self.config
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = config.return_dict if return_dict is None else return_dict

        embedded = self.embeddings(input_ids, None, position_ids, inputs_embeds)
        hidden_states, all_hidden_states, all_attentions = run_encoder(
            self, self.transformer.layer, embedded, attention_mask, output_attentions
        )
        output = BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
        )
        return output if return_dict else output.to_tuple()


class _DistilBertHead(EncoderHeadMixin, DistilBertPreTrainedModel):
    """Shared plumbing of the heads: ``self.distilbert`` run with the caller's encoder arguments."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.distilbert = DistilBertModel(config)


class _DistilBertLabelledHead(_DistilBertHead):
    """``forward`` of the heads with one ``labels`` argument (``_logits(encoded)``, then ``loss_function``)."""

    output_class: ClassVar[type[ModelOutput]] = TokenClassifierOutput

    def _logits(self, encoded: Any) -> torch.Tensor:
        raise NotImplementedError

    def loss_function(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return token_cross_entropy(logits, labels)

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
    ) -> Any:
        """The head's logits and, with ``labels`` (``-100`` is not scored), its loss."""
        encoded = self._encode(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs,
        )  # fmt: skip
        return self._finish(labelled_output(self, self._logits(encoded), labels, encoded), return_dict)


class DistilBertForMaskedLM(_DistilBertLabelledHead):
    """Encoder, then ``vocab_projector(norm(act(vocab_transform(h))))``; ``labels`` of ``-100`` are not scored."""

    output_class = MaskedLMOutput
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

    def _logits(self, encoded: Any) -> torch.Tensor:
        hidden = self.vocab_layer_norm(self.activation(self.vocab_transform(encoded.last_hidden_state)))
        return self.vocab_projector(hidden)


class DistilBertForSequenceClassification(_DistilBertLabelledHead):
    """First token -> ``pre_classifier`` -> ReLU -> dropout -> ``classifier``; loss by ``problem_type``."""

    output_class = SequenceClassifierOutput

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.pre_classifier = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, config.num_labels)
        self.dropout = nn.Dropout(config.seq_classif_dropout)
        self.post_init()

    def loss_function(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return sequence_classification_loss(logits, labels, self.config)

    def _logits(self, encoded: Any) -> torch.Tensor:
        pooled = torch.relu(self.pre_classifier(encoded.last_hidden_state[:, 0]))
        return self.classifier(self.dropout(pooled))


class DistilBertForTokenClassification(_DistilBertLabelledHead):
    """One ``classifier`` label per token (after dropout); ``labels`` of ``-100`` are not scored."""

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.dim, config.num_labels)
        self.post_init()

    def _logits(self, encoded: Any) -> torch.Tensor:
        return self.classifier(self.dropout(encoded.last_hidden_state))


class DistilBertForQuestionAnswering(_DistilBertHead):
    """Start and end logits per token (``qa_outputs``, after dropout); the loss averages both span losses."""

    def __init__(self, config: DistilBertConfig) -> None:
        require_two_labels(config, "DistilBertForQuestionAnswering")
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
        output = question_answering_output(logits, start_positions, end_positions, encoded)
        return self._finish(output, return_dict)

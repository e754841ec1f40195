"""Bidirectional transformer encoders: the pieces BERT and its descendants share.

BERT, RoBERTa, XLM-RoBERTa (and ELECTRA, CamemBERT ... after them) are one design: embeddings summed
and normalised, post-norm layers (``LayerNorm(x + dropout(dense(attention(x))))`` then the same around a
GELU MLP), a tanh pooler on the first token and a few task heads. DistilBERT and wav2vec2 reuse the
attention block under other parameter names. This module holds that design once:

- ``EncoderSelfAttention``: multi-head self-attention with configurable projection names (``query``/``key``/
  ``value`` for BERT, ``q_lin``... for DistilBERT, ``q_proj``... with ``out_proj`` for wav2vec2), ``head_mask``
  and head pruning; ``EncoderLayer`` / ``Encoder``: BERT's layer stack under BERT's parameter names
  (``attention.self.query``, ``attention.output.dense``, ``intermediate.dense``, ``output.LayerNorm`` ...).
- ``EncoderEmbeddings``: word + (optional) token type + absolute position embeddings; subclasses change how
  default position ids are made (RoBERTa counts from its padding index).
- ``EncoderPooler``, ``layer_head_masks``, ``run_encoder`` (the masked layer loop with hidden states and
  attentions collected), ``EncoderModelMixin`` (the whole BERT-style base model ``forward``) and
  ``EncoderHeadMixin`` plus the task heads every BERT-style family has in the same shape
  (``EncoderForTokenClassification``, ``EncoderForQuestionAnswering``) and the ``forward`` of those whose
  layers differ by family (``EncoderForMaskedLM``, ``EncoderForSequenceClassification``: the plugin builds
  the head in ``__init__`` and says how it makes logits).

- ``EncoderPreTrainedMixin``: the family's pre-trained base class (decoder settings refused, ``prune_heads``,
  ``_backbone(add_pooling_layer)`` from ``base_model_class``, the masked-LM bias under both its names).

Parameter names are the reference checkpoints' names; a plugin picks its own class names, prefix
(``base_model_prefix``) and ``base_model_class``. The shipped encoder families no longer build on the
mixins: ``microformers-bert`` and ``microformers-distilbert`` write their layers and forwards out in their
model files, and ``microformers-roberta`` derives from BERT's classes. They take only the small helpers
here (``check_one_input``, ``classifier_dropout``, ``layer_head_masks``, ``prune_model_heads``,
``question_answering_output``, ``require_two_labels`` ...); ``microformers-wav2vec2`` uses
``EncoderSelfAttention``. The mixins stay for plugins built on them until they move the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from microformers.errors import ConfigError, InputError
from microformers.outputs import ModelOutput

from .attention import eager_attention, get_attention_function
from .layers import get_activation
from .losses import sequence_classification_loss, span_loss, token_cross_entropy
from .masks import build_attention_mask
from .outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from .weights import KeyRenamer

__all__ = [
    "Encoder",
    "EncoderAttention",
    "EncoderEmbeddings",
    "EncoderForMaskedLM",
    "EncoderForQuestionAnswering",
    "EncoderForSequenceClassification",
    "EncoderForTokenClassification",
    "EncoderHeadMixin",
    "EncoderIntermediate",
    "EncoderLabelledHead",
    "EncoderLayer",
    "EncoderModelMixin",
    "EncoderPooler",
    "EncoderPreTrainedMixin",
    "EncoderSelfAttention",
    "ResidualLayerNorm",
    "check_one_input",
    "classifier_dropout",
    "labelled_output",
    "layer_head_masks",
    "mirror_output_bias",
    "prune_model_heads",
    "question_answering_output",
    "require_two_labels",
    "run_encoder",
]


# -- attention -----------------------------------------------------------------------------------------
class EncoderSelfAttention(nn.Module):
    """Bidirectional multi-head self-attention through the configured attention kernel.

    ``names`` are the query/key/value projection attribute names (the checkpoint's), ``output`` the name of
    an output projection kept inside this module (``None`` when the model keeps it elsewhere, as BERT does in
    ``attention.output.dense``). ``head_mask`` (``(heads,)``, original head indices) scales each head's
    probabilities; ``prune`` removes heads for good.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float,
        names: Sequence[str] = ("query", "key", "value"),
        output: str | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.kept_heads = list(range(num_heads))  # original indices of the heads left after pruning
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(dropout or 0.0)
        self.names = tuple(names)
        self.output_name = output
        for name in (*self.names, *((output,) if output else ())):
            setattr(self, name, nn.Linear(hidden_size, hidden_size))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: Any,
        output_attentions: bool,
        head_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape

        def heads(name: str) -> torch.Tensor:
            projected = getattr(self, name)(hidden_states)
            return projected.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        query, key, value = (heads(name) for name in self.names)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions:
            output, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, return_weights=True
            )
        else:
            output = attention_fn(query, key, value, attention_mask, scaling=self.scaling, dropout=dropout)
        if head_mask is not None:  # scaling a head's probabilities scales its output: (heads,) -> (1, heads, 1, 1)
            scale = head_mask[self.kept_heads].to(output.dtype).view(1, -1, 1, 1)
            output = output * scale
            weights = weights * scale if weights is not None else None
        output = output.transpose(1, 2).reshape(batch, length, -1)
        if self.output_name:
            output = getattr(self, self.output_name)(output)
        return output, weights

    def prune(self, heads: set[int], dense: nn.Linear | None = None) -> nn.Linear | None:
        """Remove the given original head indices from q/k/v and from the output projection's input.

        The output projection is this module's own (``output``) or ``dense``, returned pruned.
        """
        remove = [self.kept_heads.index(h) for h in heads if h in self.kept_heads]
        keep = [i for i in range(self.num_heads) if i not in remove]
        if not remove:
            return dense
        index = (
            torch.cat([torch.arange(i * self.head_dim, (i + 1) * self.head_dim) for i in keep])
            if keep
            else (torch.zeros(0, dtype=torch.long))
        )
        for name in self.names:
            setattr(self, name, _select(getattr(self, name), index, dim=0))
        if self.output_name:
            setattr(self, self.output_name, _select(getattr(self, self.output_name), index, dim=1))
        self.kept_heads = [self.kept_heads[i] for i in keep]
        self.num_heads = len(keep)
        return _select(dense, index, dim=1) if dense is not None else None


def _select(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A copy of ``linear`` keeping only the output (dim 0) or input (dim 1) features in ``index``."""
    weight = linear.weight.index_select(dim, index.to(linear.weight.device)).detach().clone()
    shape = (weight.shape[1], weight.shape[0])
    fresh = nn.Linear(*shape, bias=linear.bias is not None, device=weight.device, dtype=weight.dtype)
    fresh.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if linear.bias is not None:
        bias = linear.bias if dim == 1 else linear.bias.index_select(0, index.to(linear.bias.device))
        fresh.bias = nn.Parameter(bias.detach().clone(), requires_grad=linear.bias.requires_grad)
    return fresh


# -- BERT's layer stack (a config with BERT's field names) --------------------------------------------
class ResidualLayerNorm(nn.Module):
    """``LayerNorm(dropout(dense(x)) + residual)``: closes both the attention and the MLP half of a layer.

    Serves as ``attention.output`` (input ``hidden_size``) and as ``output`` (input ``intermediate_size``).
    """

    def __init__(self, config: Any, input_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(input_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + residual)


class EncoderAttention(nn.Module):
    """``self`` (the heads) and ``output`` (projection, residual, LayerNorm)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.self = EncoderSelfAttention(
            config.hidden_size, config.num_attention_heads, config.attention_probs_dropout_prob
        )
        self.output = ResidualLayerNorm(config, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: Any,
        output_attentions: bool,
        head_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self(hidden_states, attention_mask, attention_fn, output_attentions, head_mask)
        return self.output(attended, hidden_states), weights

    def prune_heads(self, heads: set[int]) -> None:
        self.output.dense = self.self.prune(heads, self.output.dense)


class EncoderIntermediate(nn.Module):
    """``act(dense(x))``, the first half of the MLP (``hidden_act``)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = get_activation(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class EncoderLayer(nn.Module):
    """Post-norm block: ``norm(x + attn(x))`` then ``norm(x + mlp(x))``."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.attention = EncoderAttention(config)
        self.intermediate = EncoderIntermediate(config)
        self.output = ResidualLayerNorm(config, config.intermediate_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: Any,
        output_attentions: bool,
        head_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.attention(hidden_states, attention_mask, attention_fn, output_attentions, head_mask)
        return self.output(self.intermediate(attended), attended), weights


class Encoder(nn.Module):
    """``layer``: ``num_hidden_layers`` layers of ``layer_class`` (a plugin names its own, e.g. ``BertLayer``)."""

    def __init__(self, config: Any, layer_class: type[nn.Module] = EncoderLayer) -> None:
        super().__init__()
        self.layer = nn.ModuleList(layer_class(config) for _ in range(config.num_hidden_layers))


class EncoderPooler(nn.Module):
    """``tanh(dense(h[:, 0]))``: the first ([CLS] / <s>) token's state, projected."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


# -- embeddings ----------------------------------------------------------------------------------------
class EncoderEmbeddings(nn.Module):
    """Word, token type (when ``type_vocab_size`` > 0) and absolute position embeddings, summed and normalised.

    Default position ids count from 0; override ``default_position_ids`` for another scheme. Bad
    positions or token types raise ``error`` (the plugin's ``InputError`` subclass).
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        max_position_embeddings: int,
        type_vocab_size: int,
        layer_norm_eps: float,
        dropout: float,
        pad_token_id: Any = None,
        error: type[InputError] = InputError,
    ) -> None:
        super().__init__()
        pad = pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < vocab_size else None
        self.error = error
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=padding_idx)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        if type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def default_position_ids(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor) -> torch.Tensor:
        """``0 .. length - 1`` for every row; raises when the input is longer than the position table."""
        length = inputs_embeds.shape[1]
        limit = self.position_embeddings.num_embeddings
        if length > limit:
            raise self.error(
                f"the input has {length} tokens but this model has max_position_embeddings={limit}; "
                "truncate the input (e.g. tokenizer(..., truncation=True, max_length=...))"
            )
        return torch.arange(length, device=inputs_embeds.device).unsqueeze(0)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        batch, length = inputs_embeds.shape[:2]
        limit = self.position_embeddings.num_embeddings
        if position_ids is None:
            position_ids = self.default_position_ids(input_ids, inputs_embeds)
        elif bool((position_ids >= limit).any()) or bool((position_ids < 0).any()):
            raise self.error(f"position_ids must lie in [0, {limit}) (max_position_embeddings)")
        embeddings = inputs_embeds
        if hasattr(self, "token_type_embeddings"):
            if token_type_ids is None:
                token_type_ids = torch.zeros((batch, length), dtype=torch.long, device=inputs_embeds.device)
            elif tuple(token_type_ids.shape) != (batch, length):
                raise self.error(
                    f"token_type_ids has shape {tuple(token_type_ids.shape)} but the input is {(batch, length)}; "
                    "pass one segment id per token"
                )
            elif bool((token_type_ids >= self.token_type_embeddings.num_embeddings).any()):
                raise self.error(
                    f"token_type_ids must lie in [0, {self.token_type_embeddings.num_embeddings}) "
                    "(type_vocab_size); this model has no embedding for a higher segment id"
                )
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        elif token_type_ids is not None:
            raise self.error("this model has no token type embeddings; do not pass token_type_ids")
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


# -- the layer loop and the base model -----------------------------------------------------------------
def layer_head_masks(
    head_mask: Any, layers: int, heads: int, error: type[InputError] = InputError
) -> list[torch.Tensor | None]:
    """``head_mask`` of shape ``(heads,)`` (every layer) or ``(layers, heads)``: 1 keeps a head, 0 silences it."""
    if head_mask is None:
        return [None] * layers
    mask = torch.as_tensor(head_mask)
    if mask.dim() == 1 and mask.shape[0] == heads:
        mask = mask.expand(layers, heads)
    if tuple(mask.shape) != (layers, heads):
        raise error(
            f"head_mask has shape {tuple(mask.shape)}; pass ({heads},) for every layer or ({layers}, {heads}), "
            "1.0 to keep a head and 0.0 to mask it (indices of the original, unpruned heads)"
        )
    return list(mask)


def run_encoder(
    model: Any,
    layers: Sequence[nn.Module],
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    output_attentions: bool,
    head_masks: Sequence[torch.Tensor | None] | None = None,
    error: type[InputError] = InputError,
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Run ``layers`` (through ``model._call_layer``, so gradient checkpointing applies) over the embeddings.

    ``attention_mask`` is the tokenizer's ``(batch, length)`` 0/1 mask (or an additive 4-D one). Returns the
    last hidden state, every hidden state (embeddings first) and, with ``output_attentions``, each layer's
    attention probabilities. Each layer is called ``layer(hidden, mask, attention_fn, output_attentions[,
    head_mask])``.
    """
    length = hidden_states.shape[1]
    if attention_mask is not None and attention_mask.dim() == 2 and attention_mask.shape[-1] != length:
        raise error(
            f"attention_mask has {attention_mask.shape[-1]} columns but the input has {length} tokens; "
            "pass the mask the tokenizer returned with these input_ids"
        )
    mask, _ = build_attention_mask(attention_mask, length, 0, causal=False, device=hidden_states.device)
    attention_fn = get_attention_function(model.config)
    all_hidden_states: list[torch.Tensor] = [hidden_states]
    all_attentions: list[torch.Tensor] = []
    for index, layer in enumerate(layers):
        extra = (head_masks[index],) if head_masks is not None else ()
        hidden_states, weights = model._call_layer(layer, hidden_states, mask, attention_fn, output_attentions, *extra)
        all_hidden_states.append(hidden_states)
        if output_attentions:
            all_attentions.append(weights)
    return hidden_states, all_hidden_states, all_attentions


def check_one_input(model: Any, input_ids: Any, inputs_embeds: Any, error: type[InputError] = InputError) -> None:
    if (input_ids is None) == (inputs_embeds is None):
        raise error(f"{type(model).__name__}.forward needs exactly one of input_ids or inputs_embeds")


class EncoderPreTrainedMixin:
    """What the pre-trained base class of a BERT-style family shares (mixed in before ``PreTrainedModel``).

    Refuses decoder / cross-attention configs, builds the base model (``base_model_class``) for the heads,
    prunes heads, and loads files that spell the masked-LM output bias either way (``output_bias_head``,
    e.g. ``"cls.predictions"``; ``legacy_names`` renames old checkpoint keys first).
    """

    base_model_class: ClassVar[type[nn.Module]]
    input_error: ClassVar[type[InputError]] = InputError
    output_bias_head: ClassVar[str] = "lm_head"
    legacy_names: ClassVar[KeyRenamer | None] = None
    supports_gradient_checkpointing = True
    config: Any

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)  # type: ignore[call-arg]
        for setting in ("is_decoder", "add_cross_attention"):
            if getattr(config, setting, False):
                raise ConfigError(
                    f"{setting}=True in the {type(config).__name__} asks for a causal or cross-attending encoder, "
                    f"which {type(self).__name__} does not provide; set it to false for the bidirectional encoder"
                )

    def _backbone(self, add_pooling_layer: bool = True) -> nn.Module:
        return self.base_model_class(self.config, add_pooling_layer=add_pooling_layer)

    def prune_heads(self, heads_to_prune: dict[int, list[int]]) -> None:
        """Remove attention heads (``{layer: [head, ...]}``, original indices); recorded in ``config.pruned_heads``."""
        prune_model_heads(self, heads_to_prune, self.input_error)

    def _checkpoint_key_map(self, checkpoint_keys: set[str]) -> dict[str, str]:
        if self.legacy_names is not None:
            renamed = self.legacy_names.rename_all(checkpoint_keys)
        else:
            renamed = {key: key for key in checkpoint_keys}
        renamed = mirror_output_bias(renamed, self.output_bias_head)
        mapping = super()._checkpoint_key_map(set(renamed))  # type: ignore[misc]
        return {name: renamed[key] for name, key in mapping.items()}


class EncoderModelMixin:
    """``forward``, head pruning and embeddings access of a BERT-style base model.

    The class mixing it in (before its ``PreTrainedModel`` base) calls ``self._build_encoder(...)`` in
    ``__init__``; errors are raised as its ``input_error`` (an ``InputError`` subclass).
    """

    config: Any
    _call_layer: Callable[..., Any]

    def _build_encoder(
        self, embeddings: nn.Module, add_pooling_layer: bool, layer_class: type[nn.Module] = EncoderLayer
    ) -> None:
        self.embeddings = embeddings
        self.encoder = Encoder(self.config, layer_class)
        self.pooler = EncoderPooler(self.config) if add_pooling_layer else None
        self._prune_heads(getattr(self.config, "pruned_heads", None) or {})

    def _prune_heads(self, heads_to_prune: dict[Any, list[int]]) -> None:
        for layer, heads in heads_to_prune.items():
            self.encoder.layer[int(layer)].attention.prune_heads(set(heads))

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.word_embeddings = value

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
        **kwargs: Any,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions | tuple[Any, ...]:
        config, error = self.config, getattr(self, "input_error", InputError)
        check_one_input(self, input_ids, inputs_embeds, error)
        head_masks = layer_head_masks(head_mask, config.num_hidden_layers, config.num_attention_heads, error)
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = config.return_dict if return_dict is None else return_dict

        embedded = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        hidden_states, all_hidden_states, all_attentions = run_encoder(
            self, self.encoder.layer, embedded, attention_mask, output_attentions, head_masks, error
        )
        output = BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=hidden_states,
            pooler_output=self.pooler(hidden_states) if self.pooler is not None else None,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
        )
        return output if return_dict else output.to_tuple()


def prune_model_heads(model: Any, heads_to_prune: dict[int, list[int]], error: type[InputError] = InputError) -> None:
    """``model.prune_heads``: remove heads (``{layer: [head, ...]}``, original indices); kept in ``config.pruned_heads``."""
    config = model.config
    pruned = {int(k): set(v) for k, v in (getattr(config, "pruned_heads", None) or {}).items()}
    for layer, heads in heads_to_prune.items():
        if not 0 <= int(layer) < config.num_hidden_layers:
            raise error(f"prune_heads: layer {layer} does not exist ({config.num_hidden_layers} layers)")
        bad = [h for h in heads if not 0 <= h < config.num_attention_heads]
        if bad:
            raise error(f"prune_heads: heads {bad} do not exist ({config.num_attention_heads} heads)")
        pruned.setdefault(int(layer), set()).update(heads)
    model.base_model._prune_heads({int(k): list(v) for k, v in heads_to_prune.items()})
    config.pruned_heads = {str(k): sorted(v) for k, v in pruned.items()}


def mirror_output_bias(renamed: dict[str, str], head: str) -> dict[str, str]:
    """The MLM output bias has two names (``{head}.bias`` and ``{head}.decoder.bias``) holding the same values;
    a checkpoint with only one fills both. ``renamed`` maps our name -> checkpoint key."""
    for key in list(renamed):
        if key.endswith(f"{head}.decoder.bias"):
            renamed.setdefault(key[: -len("decoder.bias")] + "bias", renamed[key])
        elif key.endswith(f"{head}.bias"):
            renamed.setdefault(key[: -len("bias")] + "decoder.bias", renamed[key])
    return renamed


# -- heads ---------------------------------------------------------------------------------------------
def classifier_dropout(config: Any) -> float:
    """``classifier_dropout``, or ``hidden_dropout_prob`` where the config leaves it ``None``."""
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


class EncoderHeadMixin:
    """Shared plumbing of task heads over the base model stored under ``base_model_prefix``."""

    config: Any
    base_model: Any

    def get_input_embeddings(self) -> nn.Module:
        return self.base_model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.base_model.set_input_embeddings(value)

    def _encode(self, **encoder_kwargs: Any) -> Any:
        return self.base_model(**encoder_kwargs, return_dict=True)

    def _finish(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    def _encode_bert_style(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        output_attentions: bool | None,
        output_hidden_states: bool | None,
        kwargs: dict[str, Any],
    ) -> Any:
        return self._encode(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, head_mask=kwargs.pop("head_mask", None),
        )  # fmt: skip


def question_answering_output(
    logits: torch.Tensor, start_positions: Any, end_positions: Any, encoded: Any
) -> QuestionAnsweringModelOutput:
    """Split ``(batch, length, 2)`` logits into start and end logits; the span loss when both positions are given."""
    start_logits, end_logits = (part.squeeze(-1).contiguous() for part in logits.split(1, dim=-1))
    loss = None
    if start_positions is not None and end_positions is not None:
        loss = span_loss(start_logits, end_logits, start_positions, end_positions)
    return QuestionAnsweringModelOutput(
        loss=loss,
        start_logits=start_logits,
        end_logits=end_logits,
        hidden_states=encoded.hidden_states,
        attentions=encoded.attentions,
    )


def require_two_labels(config: Any, head: str) -> None:
    if config.num_labels != 2:
        raise ConfigError(
            f"{head} needs num_labels=2 (start and end logits) but the config has num_labels={config.num_labels}; "
            "drop num_labels/id2label from config.json or set num_labels=2"
        )


class EncoderLabelledHead(EncoderHeadMixin):
    """``forward`` of a head with one ``labels`` argument: ``_logits(encoded)``, then ``loss_function``.

    Subclasses set ``output_class`` (the task's output), ``loss_function`` (``token_cross_entropy`` or, with
    the config, ``sequence_classification_loss``) and build their layers in ``__init__``.
    """

    output_class: ClassVar[type[ModelOutput]] = TokenClassifierOutput

    def _logits(self, encoded: Any) -> torch.Tensor:
        raise NotImplementedError

    def loss_function(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return token_cross_entropy(logits, labels)

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
        **kwargs: Any,
    ) -> Any:
        """The head's logits and, with ``labels`` (``-100`` is not scored), its loss."""
        encoded = self._encode_bert_style(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, kwargs,
        )  # fmt: skip
        return self._finish(labelled_output(self, self._logits(encoded), labels, encoded), return_dict)


def labelled_output(head: Any, logits: torch.Tensor, labels: torch.Tensor | None, encoded: Any) -> ModelOutput:
    """``head.output_class`` with ``logits``, ``head.loss_function(logits, labels)`` and the encoder's extras."""
    loss = head.loss_function(logits, labels) if labels is not None else None
    return head.output_class(
        loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
    )


class EncoderForMaskedLM(EncoderLabelledHead):
    """Masked-LM head: the plugin's ``__init__`` builds it, ``_mlm_logits(hidden_states)`` applies it."""

    output_class = MaskedLMOutput

    def _mlm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _logits(self, encoded: Any) -> torch.Tensor:
        return self._mlm_logits(encoded.last_hidden_state)


class EncoderForSequenceClassification(EncoderLabelledHead):
    """Sequence classifier: the plugin builds it and implements ``_logits``; the loss follows ``problem_type``."""

    output_class = SequenceClassifierOutput

    def loss_function(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return sequence_classification_loss(logits, labels, self.config)


class EncoderForTokenClassification(EncoderLabelledHead):
    """Per-token linear ``classifier`` after ``dropout`` (NER and friends); ``labels`` of ``-100`` are not scored.

    Mixed in before the plugin's pre-trained base class, which provides ``_backbone(add_pooling_layer)``.
    """

    output_class = TokenClassifierOutput
    _backbone: Callable[..., nn.Module]
    base_model_prefix: str
    post_init: Callable[[], None]

    def __init__(self, config: Any) -> None:
        super().__init__(config)  # type: ignore[call-arg]
        self.num_labels = config.num_labels
        setattr(self, self.base_model_prefix, self._backbone(add_pooling_layer=False))
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _logits(self, encoded: Any) -> torch.Tensor:
        return self.classifier(self.dropout(encoded.last_hidden_state))


class EncoderForQuestionAnswering(EncoderHeadMixin):
    """Extractive QA: per-token start and end logits (``qa_outputs`` has ``num_labels`` = 2 outputs)."""

    _backbone: Callable[..., nn.Module]
    base_model_prefix: str
    post_init: Callable[[], None]

    def __init__(self, config: Any) -> None:
        require_two_labels(config, type(self).__name__)
        super().__init__(config)  # type: ignore[call-arg]
        self.num_labels = config.num_labels
        setattr(self, self.base_model_prefix, self._backbone(add_pooling_layer=False))
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
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
        encoded = self._encode_bert_style(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, kwargs,
        )  # fmt: skip
        logits = self.qa_outputs(encoded.last_hidden_state)
        output = question_answering_output(logits, start_positions, end_positions, encoded)
        return self._finish(output, return_dict)

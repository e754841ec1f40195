"""BERT encoder and its task heads, written out top to bottom.

Reading order: embeddings, self-attention, attention output, MLP (intermediate + output), layer,
encoder, pooler, the pre-trained base class, the base model's ``forward``, then the task heads. The
configuration is ``BertConfig`` in ``configuration_bert.py``. From the SDK this file takes only building
blocks: the attention functions (``config._attn_implementation``: ``sdpa``, ``eager`` or a registered one),
the padding-mask helper, output dataclasses, losses and small head helpers; every ``forward`` is here.

Parameter names equal the checkpoint tensor names of the reference implementation
(``bert.embeddings.word_embeddings.weight``, ``bert.encoder.layer.{i}.attention.self.query.weight``,
``bert.encoder.layer.{i}.output.LayerNorm.weight``, ``bert.pooler.dense.weight``,
``cls.predictions.transform.dense.weight``, ``cls.predictions.bias``, ``cls.seq_relationship.weight``,
``classifier.weight``, ``qa_outputs.weight``), so files load and save without renaming; the legacy
``LayerNorm.gamma`` / ``LayerNorm.beta`` spelling of old TF-converted files is renamed on load.

Supported: ``head_mask`` and ``prune_heads``, ``output_attentions`` / ``output_hidden_states``, gradient
checkpointing, absolute position embeddings, feed-forward chunking (``chunk_size_feed_forward``: the MLP runs
on that many positions at a time, same outputs, less peak memory), and decoder use: with ``is_decoder=True``
self-attention is causal and keeps a KV cache (``past_key_values``, ``use_cache``), which is how
``BertLMHeadModel`` generates. Cross-attention (``add_cross_attention``) and relative position embeddings are
refused by the pre-trained base class and the config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel, logging
from microformers.errors import ConfigError, InputError
from microformers.outputs import ModelOutput
from microformers_sdk.attention import AttentionFunction, eager_attention, get_attention_function
from microformers_sdk.cache import Cache, DynamicCache, as_cache
from microformers_sdk.decoder_heads import keep_logits_positions
from microformers_sdk.encoder import (
    check_one_input,
    classifier_dropout,
    flatten_choices,
    layer_head_masks,
    mirror_output_bias,
    multiple_choice_output,
    prune_model_heads,
    question_answering_output,
    require_two_labels,
)
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import causal_lm_loss, sequence_classification_loss, token_cross_entropy
from microformers_sdk.masks import build_attention_mask, capturing_graph
from microformers_sdk.outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from microformers_sdk.pytorch_utils import apply_chunking_to_forward, prune_linear_layer
from microformers_sdk.weights import KeyRenamer

from .configuration_bert import BertConfig

__all__ = [
    "BertConfig",
    "BertForMaskedLM",
    "BertForMultipleChoice",
    "BertForNextSentencePrediction",
    "BertForPreTraining",
    "BertForPreTrainingOutput",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertInputError",
    "BertLMHeadModel",
    "BertModel",
    "BertPreTrainedModel",
]

logger = logging.get_logger(__name__)

# Old TF-converted checkpoints spell LayerNorm parameters gamma/beta.
LEGACY_NAMES = KeyRenamer([(r"LayerNorm\.gamma$", "LayerNorm.weight"), (r"LayerNorm\.beta$", "LayerNorm.bias")])

# What a layer returns: its hidden states and, with ``output_attentions``, its attention probabilities.
LayerOutput = tuple[torch.Tensor, torch.Tensor | None]


class BertInputError(InputError):
    """The arguments of a forward call do not fit the model (missing inputs, too long, wrong shapes)."""


class BertForPreTrainingOutput(ModelOutput):
    loss: Any
    prediction_logits: Any
    seq_relationship_logits: Any
    hidden_states: Any
    attentions: Any


# -- embeddings ----------------------------------------------------------------------------------------
class BertEmbeddings(nn.Module):
    """Word, token type and absolute position embeddings, summed, normalised and dropped out.

    Token type embeddings exist when ``type_vocab_size`` > 0. Default position ids are ``0 .. length - 1``.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=padding_idx)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        if config.type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        past_length: int = 0,
    ) -> torch.Tensor:
        """``past_length``: tokens already in a decoder's KV cache; default positions continue after them."""
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        batch, length = inputs_embeds.shape[:2]
        positions = self.position_embeddings.num_embeddings
        if position_ids is None:
            if past_length + length > positions:
                raise BertInputError(
                    f"the input reaches {past_length + length} tokens but this model has "
                    f"max_position_embeddings={positions}; truncate the input (e.g. tokenizer(..., "
                    "truncation=True, max_length=...)) or generate fewer tokens (max_new_tokens)"
                )
            position_ids = torch.arange(past_length, past_length + length, device=inputs_embeds.device).unsqueeze(0)
        elif not capturing_graph() and (  # no data branch in traced or exported graphs
            bool((position_ids >= positions).any()) or bool((position_ids < 0).any())
        ):
            raise BertInputError(f"position_ids must lie in [0, {positions}) (max_position_embeddings)")

        embeddings = inputs_embeds
        if hasattr(self, "token_type_embeddings"):
            types = self.token_type_embeddings.num_embeddings
            if token_type_ids is None:
                token_type_ids = torch.zeros((batch, length), dtype=torch.long, device=inputs_embeds.device)
            elif tuple(token_type_ids.shape) != (batch, length):
                raise BertInputError(
                    f"token_type_ids has shape {tuple(token_type_ids.shape)} but the input is {(batch, length)}; "
                    "pass one segment id per token"
                )
            elif not capturing_graph() and bool((token_type_ids >= types).any()):  # no data branch in graphs
                raise BertInputError(
                    f"token_type_ids must lie in [0, {types}) (type_vocab_size); "
                    "this model has no embedding for a higher segment id"
                )
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        elif token_type_ids is not None:
            raise BertInputError("this model has no token type embeddings; do not pass token_type_ids")
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


# -- attention -----------------------------------------------------------------------------------------
class BertSelfAttention(nn.Module):
    """Bidirectional multi-head attention: ``query``, ``key`` and ``value`` projections, then the attention kernel.

    Returns the heads' concatenated context (projected back by ``BertSelfOutput``). ``head_mask`` (one value
    per original head) scales each head's probabilities; ``kept_heads`` maps the heads left after
    ``prune`` to their original indices. As a decoder's, ``past_key_values`` holds the earlier tokens' keys and
    values (layer ``layer_idx``) and ``is_causal`` asks the kernel for causality when no mask carries it.
    """

    def __init__(self, config: BertConfig, layer_idx: int = 0) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.kept_heads = list(range(self.num_heads))
        self.attention_dropout = float(config.attention_probs_dropout_prob or 0.0)
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        head_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        is_causal: bool = False,
    ) -> LayerOutput:
        batch, length, _ = hidden_states.shape
        split = (batch, length, self.num_heads, self.head_dim)  # -> (batch, heads, length, head_dim)
        query = self.query(hidden_states).view(split).transpose(1, 2)
        key = self.key(hidden_states).view(split).transpose(1, 2)
        value = self.value(hidden_states).view(split).transpose(1, 2)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        dropout = self.attention_dropout if self.training else 0.0

        weights = None
        if output_attentions:  # only the eager kernel can hand back the probabilities
            context, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, return_weights=True,
                is_causal=is_causal,
            )  # fmt: skip
        else:
            context = attention_fn(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal
            )
        if head_mask is not None:
            # Scaling a head's probabilities scales its context by the same factor.
            scale = head_mask[self.kept_heads].to(context.dtype).view(1, -1, 1, 1)
            context = context * scale
            weights = weights * scale if weights is not None else None
        return context.transpose(1, 2).reshape(batch, length, -1), weights

    def prune(self, heads: set[int]) -> torch.Tensor | None:
        """Remove the given original head indices from ``query``/``key``/``value``.

        Returns the kept feature indices (for the output projection's input), ``None`` when nothing changed.
        """
        drop = {self.kept_heads.index(head) for head in heads if head in self.kept_heads}
        if not drop:
            return None
        keep = [i for i in range(self.num_heads) if i not in drop]
        index = torch.arange(self.num_heads * self.head_dim).view(self.num_heads, self.head_dim)[keep].flatten()
        self.query = prune_linear_layer(self.query, index, dim=0)
        self.key = prune_linear_layer(self.key, index, dim=0)
        self.value = prune_linear_layer(self.value, index, dim=0)
        self.kept_heads = [self.kept_heads[i] for i in keep]
        self.num_heads = len(keep)
        return index


class BertSelfOutput(nn.Module):
    """``LayerNorm(dropout(dense(x)) + residual)``: projects the attention context back and closes the residual."""

    def __init__(self, config: BertConfig, input_size: int | None = None) -> None:
        super().__init__()
        self.dense = nn.Linear(input_size or config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + residual)


class BertAttention(nn.Module):
    """``self`` (the heads) and ``output`` (projection, residual, LayerNorm)."""

    def __init__(self, config: BertConfig, layer_idx: int = 0) -> None:
        super().__init__()
        self.self = BertSelfAttention(config, layer_idx)
        self.output = BertSelfOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        head_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        is_causal: bool = False,
    ) -> LayerOutput:
        context, weights = self.self(
            hidden_states, attention_mask, attention_fn, output_attentions, head_mask, past_key_values, is_causal
        )
        return self.output(context, hidden_states), weights

    def prune_heads(self, heads: set[int]) -> None:
        kept = self.self.prune(heads)
        if kept is not None:
            self.output.dense = prune_linear_layer(self.output.dense, kept, dim=1)


# -- MLP -----------------------------------------------------------------------------------------------
class BertIntermediate(nn.Module):
    """``act(dense(x))`` up to ``intermediate_size`` (``hidden_act``, GELU for BERT)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = get_activation(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(BertSelfOutput):
    """``LayerNorm(dropout(dense(x)) + residual)`` back down from ``intermediate_size``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, input_size=config.intermediate_size)


# -- layer, encoder, pooler ----------------------------------------------------------------------------
class BertLayer(nn.Module):
    """Post-norm block: ``norm(x + attn(x))`` then ``norm(x + mlp(x))``.

    With ``chunk_size_feed_forward`` > 0 the MLP runs on that many positions at a time (positions do not
    interact there, so the output is the same, and the ``intermediate_size``-wide activations of only one
    chunk are alive at once).
    """

    def __init__(self, config: BertConfig, layer_idx: int = 0) -> None:
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.attention = BertAttention(config, layer_idx)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        head_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        is_causal: bool = False,
    ) -> LayerOutput:
        attended, weights = self.attention(
            hidden_states, attention_mask, attention_fn, output_attentions, head_mask, past_key_values, is_causal
        )
        return apply_chunking_to_forward(self.feed_forward, self.chunk_size_feed_forward, 1, attended), weights

    def feed_forward(self, attended: torch.Tensor) -> torch.Tensor:
        return self.output(self.intermediate(attended), attended)


def _call(layer: nn.Module, *args: Any) -> Any:
    return layer(*args)


class BertEncoder(nn.Module):
    """``num_hidden_layers`` layers run in turn, collecting every hidden state (embeddings first) and attention."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config, i) for i in range(config.num_hidden_layers))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        head_masks: list[torch.Tensor | None],
        call_layer: Callable[..., Any] = _call,
        past_key_values: Cache | None = None,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """``call_layer(layer, *args)`` runs one layer; the model passes its own so gradient checkpointing applies.
        ``past_key_values`` and ``is_causal`` are a decoder's (``is_decoder=True``)."""
        all_hidden_states = [hidden_states]
        all_attentions = []
        for layer, head_mask in zip(self.layer, head_masks):
            hidden_states, weights = call_layer(
                layer, hidden_states, attention_mask, attention_fn, output_attentions, head_mask, past_key_values,
                is_causal,
            )  # fmt: skip
            all_hidden_states.append(hidden_states)
            if output_attentions:
                all_attentions.append(weights)
        return hidden_states, tuple(all_hidden_states), tuple(all_attentions)


class BertPooler(nn.Module):
    """``tanh(dense(h[:, 0]))``: the [CLS] token's final state, projected."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


# -- pre-trained base class ----------------------------------------------------------------------------
class BertPreTrainedModel(PreTrainedModel):
    """Weight init, head pruning and checkpoint-name handling shared by ``BertModel`` and every head."""

    config_class = BertConfig
    base_model_prefix = "bert"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["BertLayer"]
    # Checkpoints saved by heads without a pooler (e.g. BertForMaskedLM) load into models that have one.
    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = [r"(^|\.)pooler\."]
    # Older exporters saved the position/token-type id buffers, and tied files may repeat the MLM bias.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        r"embeddings\.position_ids$",
        r"embeddings\.token_type_ids$",
        r"cls\.predictions\.decoder\.bias$",
    ]
    config: BertConfig

    def __init__(self, config: BertConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        if getattr(config, "add_cross_attention", False):
            raise ConfigError(
                f"add_cross_attention=True in the {type(config).__name__} asks for cross-attention layers "
                f"(BERT as the decoder of an encoder-decoder), which {type(self).__name__} does not provide; set it "
                "to false (is_decoder=True alone gives a causal decoder with a KV cache)"
            )

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, BertLMPredictionHead):
            nn.init.zeros_(module.bias)

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.base_model.set_input_embeddings(value)

    def prune_heads(self, heads_to_prune: dict[int, list[int]]) -> None:
        """Remove attention heads (``{layer: [head, ...]}``, original indices); recorded in ``config.pruned_heads``.

        Checks the indices and calls ``BertModel._prune_heads``.
        """
        prune_model_heads(self, heads_to_prune, BertInputError)

    def _checkpoint_key_map(self, checkpoint_keys: set[str]) -> dict[str, str]:
        # gamma/beta renamed; a file holding the MLM output bias under only one of its two names fills both.
        renamed = mirror_output_bias(LEGACY_NAMES.rename_all(checkpoint_keys), "cls.predictions")
        mapping = super()._checkpoint_key_map(set(renamed))
        return {name: renamed[key] for name, key in mapping.items()}

    def _returned(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


# -- base model ----------------------------------------------------------------------------------------
class BertModel(BertPreTrainedModel):
    """The encoder (and, unless ``add_pooling_layer=False``, the pooler).

    Returns ``BaseModelOutputWithPoolingAndCrossAttentions``; ``hidden_states`` holds the embedding
    output and every layer's output (``num_hidden_layers + 1`` tensors).
    """

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self._prune_heads(getattr(config, "pruned_heads", None) or {})
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.word_embeddings = value

    def _prune_heads(self, heads_to_prune: dict[Any, list[int]]) -> None:
        for layer, heads in heads_to_prune.items():
            self.encoder.layer[int(layer)].attention.prune_heads(set(heads))

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
        """``attention_mask`` is the tokenizer's ``(batch, length)`` 0/1 mask or a ready-made 4-D one (as a
        decoder with a cache, the mask covers the cached tokens too); ``head_mask`` is ``(heads,)`` for every
        layer or ``(layers, heads)``, 1 to keep a head and 0 to mask it. ``past_key_values`` / ``use_cache``
        (default ``config.use_cache``) apply with ``is_decoder=True`` only, as in the reference."""
        config = self.config
        check_one_input(self, input_ids, inputs_embeds, BertInputError)
        head_masks = layer_head_masks(head_mask, config.num_hidden_layers, config.num_attention_heads, BertInputError)
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        is_decoder = bool(config.is_decoder)
        cache = None
        if is_decoder:
            use_cache = getattr(config, "use_cache", True) if use_cache is None else use_cache
            cache = as_cache(past_key_values)
            if use_cache and cache is None:
                cache = DynamicCache()
        elif past_key_values is not None:
            raise BertInputError(
                "past_key_values was given but this BERT model is an encoder (is_decoder=False) and keeps no cache; "
                "drop it, or load the model with is_decoder=True"
            )
        past_length = cache.get_seq_length() if cache is not None else 0

        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds, past_length)
        length = hidden_states.shape[1]
        if attention_mask is not None and attention_mask.dim() == 2 and attention_mask.shape[-1] != past_length + length:
            cached = f" and {past_length} cached ones" if past_length else ""
            raise BertInputError(
                f"attention_mask has {attention_mask.shape[-1]} columns but the input has {length} tokens{cached}; "
                "pass the mask the tokenizer returned with these input_ids"
            )
        mask, is_causal = build_attention_mask(
            attention_mask, length, past_length, causal=is_decoder, device=hidden_states.device
        )
        hidden_states, all_hidden_states, all_attentions = self.encoder(
            hidden_states, mask, get_attention_function(config), output_attentions, head_masks, self._call_layer,
            cache, is_causal,
        )  # fmt: skip
        output = BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=hidden_states,
            pooler_output=self.pooler(hidden_states) if self.pooler is not None else None,
            hidden_states=all_hidden_states if output_hidden_states else None,
            past_key_values=cache if use_cache else None,
            attentions=all_attentions if output_attentions else None,
        )
        return self._returned(output, return_dict)


# -- heads ---------------------------------------------------------------------------------------------
class BertPredictionHeadTransform(nn.Module):
    """``LayerNorm(act(dense(x)))`` before the vocabulary projection."""

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


# Tied with tie_word_embeddings: the MLM decoder reads the word embeddings and the head's own bias.
_MLM_TIED_WEIGHTS: dict[str, str] = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}


class BertForPreTraining(BertPreTrainedModel):
    """Encoder with both pre-training heads (masked LM and next sentence prediction)."""

    _tied_weights_keys: ClassVar[dict[str, str]] = _MLM_TIED_WEIGHTS

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.cls.predictions.decoder = value

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
        head_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> BertForPreTrainingOutput | tuple[Any, ...]:
        """The loss (masked LM plus next sentence) needs both ``labels`` and ``next_sentence_label``."""
        encoded = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask,
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
        return self._returned(output, return_dict)


class BertForMaskedLM(BertPreTrainedModel):
    """Encoder plus the masked-language-model head; ``labels`` of ``-100`` are not scored."""

    _tied_weights_keys: ClassVar[dict[str, str]] = _MLM_TIED_WEIGHTS

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.cls.predictions.decoder = value

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
        encoded = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        logits = self.cls.predictions(encoded.last_hidden_state)
        output = MaskedLMOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class BertLMHeadModel(BertPreTrainedModel):
    """BERT as a left-to-right language model: ``is_decoder=True`` makes self-attention causal with a KV cache,
    and the masked-LM head (``cls.predictions``, tied to the word embeddings) predicts the next token.

    Without ``is_decoder`` the encoder stays bidirectional (and keeps no cache), as in the reference, which
    warns about it; ``generate`` then recomputes every step. ``labels`` are the input ids: the loss scores
    position ``i``'s prediction against token ``i + 1`` (``-100`` not scored).
    """

    _tied_weights_keys: ClassVar[dict[str, str]] = _MLM_TIED_WEIGHTS

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        if not config.is_decoder:
            logger.warning("BertLMHeadModel is meant as a decoder: set is_decoder=True in the config for causal attention")
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.cls.predictions.decoder = value

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
        """``logits_to_keep=n`` computes logits for the last ``n`` positions only (0: all); a tensor picks positions.
        With ``labels`` no cache is kept (``use_cache=False``), as in the reference."""
        for name in ("encoder_hidden_states", "encoder_attention_mask"):
            if kwargs.get(name) is not None:
                raise BertInputError(
                    f"{name} needs cross-attention layers (add_cross_attention=True), which microformers-bert does "
                    "not provide; BertLMHeadModel runs as a decoder-only language model"
                )
        if labels is not None:
            use_cache = False
        encoded = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask, past_key_values=past_key_values,
            use_cache=use_cache,
        )  # fmt: skip
        logits = self.cls.predictions(keep_logits_positions(encoded.last_hidden_state, logits_to_keep))
        loss = causal_lm_loss(logits, labels, kwargs.get("num_items_in_batch")) if labels is not None else None
        output = CausalLMOutputWithCrossAttentions(
            loss=loss,
            logits=logits,
            past_key_values=encoded.past_key_values,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class BertForNextSentencePrediction(BertPreTrainedModel):
    """Encoder, pooler and the two-way "is sentence B the continuation of A" classifier (label 0: it is)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertOnlyNSPHead(config)
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
    ) -> NextSentencePredictorOutput | tuple[Any, ...]:
        encoded = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        logits = self.cls.seq_relationship(encoded.pooler_output)
        output = NextSentencePredictorOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class BertForSequenceClassification(BertPreTrainedModel):
    """Pooled [CLS] state, dropout and a linear classifier; the loss follows ``config.problem_type``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
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
        encoded = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        logits = self.classifier(self.dropout(encoded.pooler_output))
        output = SequenceClassifierOutput(
            loss=sequence_classification_loss(logits, labels, self.config) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class BertForMultipleChoice(BertPreTrainedModel):
    """Scores each of ``num_choices`` candidate sequences per example: pooled [CLS] state, dropout and a
    one-output ``classifier``; inputs are ``(batch, num_choices, length)`` and ``labels`` the right choice."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(classifier_dropout(config))
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
        check_one_input(self, input_ids, inputs_embeds, BertInputError)
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        encoded = self.bert(
            flatten_choices(input_ids, "input_ids", BertInputError),
            flatten_choices(attention_mask, "attention_mask", BertInputError),
            flatten_choices(token_type_ids, "token_type_ids", BertInputError),
            flatten_choices(position_ids, "position_ids", BertInputError),
            flatten_choices(inputs_embeds, "inputs_embeds", BertInputError),
            output_attentions, output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        scores = self.classifier(self.dropout(encoded.pooler_output))
        return self._returned(multiple_choice_output(scores, num_choices, labels, encoded), return_dict)


class BertForTokenClassification(BertPreTrainedModel):
    """Per-token linear classifier (NER and friends); ``labels`` of ``-100`` are not scored."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
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
    ) -> TokenClassifierOutput | tuple[Any, ...]:
        encoded = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        logits = self.classifier(self.dropout(encoded.last_hidden_state))
        output = TokenClassifierOutput(
            loss=token_cross_entropy(logits, labels) if labels is not None else None,
            logits=logits,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )
        return self._returned(output, return_dict)


class BertForQuestionAnswering(BertPreTrainedModel):
    """Extractive QA: per-token start and end logits (``qa_outputs`` has ``num_labels`` = 2 outputs)."""

    def __init__(self, config: BertConfig) -> None:
        require_two_labels(config, type(self).__name__)
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
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
        head_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> QuestionAnsweringModelOutput | tuple[Any, ...]:
        """Start and end logits per token; the span loss when both positions are given."""
        encoded = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
            output_hidden_states, return_dict=True, head_mask=head_mask,
        )  # fmt: skip
        logits = self.qa_outputs(encoded.last_hidden_state)
        output = question_answering_output(logits, start_positions, end_positions, encoded)
        return self._returned(output, return_dict)

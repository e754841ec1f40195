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
token) where the head uses it.
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
    BaseModelOutputWithPoolingAndCrossAttentions,
    MaskedLMOutput,
    ModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
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


class BertEmbeddings(nn.Module):
    """Word, token type and absolute position embeddings, summed and normalised."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=padding_idx)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

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
            if length > limit:
                raise BertInputError(
                    f"the input has {length} tokens but this model has max_position_embeddings={limit}; "
                    "truncate the input (e.g. tokenizer(..., truncation=True, max_length=...))"
                )
            position_ids = torch.arange(length, device=inputs_embeds.device).unsqueeze(0)
        elif bool((position_ids >= limit).any()) or bool((position_ids < 0).any()):
            raise BertInputError(f"position_ids must lie in [0, {limit}) (max_position_embeddings)")
        if token_type_ids is None:
            token_type_ids = torch.zeros((batch, length), dtype=torch.long, device=inputs_embeds.device)
        elif tuple(token_type_ids.shape) != (batch, length):
            raise BertInputError(
                f"token_type_ids has shape {tuple(token_type_ids.shape)} but the input is {(batch, length)}; "
                "pass one segment id per token"
            )
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.kept_heads = list(range(self.num_heads))  # original indices of the heads left after prune_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_probs_dropout_prob or 0.0)
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: Any,
        output_attentions: bool,
        head_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape

        def heads(projection: nn.Linear) -> torch.Tensor:
            return projection(hidden_states).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        query, key, value = heads(self.query), heads(self.key), heads(self.value)
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
        return output.transpose(1, 2).reshape(batch, length, -1), weights

    def prune(self, heads: set[int], dense: nn.Linear) -> nn.Linear:
        """Remove the given original head indices from q/k/v and from ``dense`` (the output projection's input)."""
        remove = [self.kept_heads.index(h) for h in heads if h in self.kept_heads]
        keep = [i for i in range(self.num_heads) if i not in remove]
        if not remove:
            return dense
        index = torch.cat([torch.arange(i * self.head_dim, (i + 1) * self.head_dim) for i in keep]) if keep else (
            torch.zeros(0, dtype=torch.long)
        )
        for name in ("query", "key", "value"):
            setattr(self, name, _select(getattr(self, name), index, dim=0))
        self.kept_heads = [self.kept_heads[i] for i in keep]
        self.num_heads = len(keep)
        return _select(dense, index, dim=1)


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


class BertOutput(nn.Module):
    """``LayerNorm(dropout(dense(x)) + residual)``: closes both the attention and the MLP half of a layer.

    Serves as ``attention.output`` (input ``hidden_size``) and as ``output`` (input ``intermediate_size``).
    """

    def __init__(self, config: BertConfig, input_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(input_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertOutput(config, config.hidden_size)

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


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = get_activation(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertLayer(nn.Module):
    """Post-norm block: ``norm(x + attn(x))`` then ``norm(x + mlp(x))``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config, config.intermediate_size)

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


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    """``tanh(dense(h[:, 0]))``: the first ([CLS]) token's state, projected."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


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


class BertPreTrainedModel(PreTrainedModel):
    config_class = BertConfig
    base_model_prefix = "bert"
    _no_split_modules: ClassVar[list[str]] = ["BertLayer"]
    supports_gradient_checkpointing = True
    # Checkpoints saved by heads without a pooler (e.g. BertForMaskedLM) load into models that have one.
    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = [r"(^|\.)pooler\."]
    # Older exporters saved the position/token-type id buffers, and tied files may repeat the MLM bias.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [
        r"embeddings\.position_ids$",
        r"embeddings\.token_type_ids$",
        r"cls\.predictions\.decoder\.bias$",
    ]

    def __init__(self, config: BertConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        for setting in ("is_decoder", "add_cross_attention"):
            if getattr(config, setting, False):
                raise ConfigError(
                    f"{setting}=True in the BERT config asks for a causal or cross-attending BERT, which "
                    "microformers-bert does not provide; set it to false for the bidirectional encoder"
                )

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, BertLMPredictionHead):
            nn.init.zeros_(module.bias)

    def prune_heads(self, heads_to_prune: dict[int, list[int]]) -> None:
        """Remove attention heads (``{layer: [head, ...]}``, original indices); recorded in ``config.pruned_heads``."""
        pruned = {int(k): set(v) for k, v in (getattr(self.config, "pruned_heads", None) or {}).items()}
        for layer, heads in heads_to_prune.items():
            if not 0 <= int(layer) < self.config.num_hidden_layers:
                raise BertInputError(f"prune_heads: layer {layer} does not exist ({self.config.num_hidden_layers} layers)")
            bad = [h for h in heads if not 0 <= h < self.config.num_attention_heads]
            if bad:
                raise BertInputError(f"prune_heads: heads {bad} do not exist ({self.config.num_attention_heads} heads)")
            pruned.setdefault(int(layer), set()).update(heads)
        base = self.base_model
        base._prune_heads({int(k): list(v) for k, v in heads_to_prune.items()})
        self.config.pruned_heads = {str(k): sorted(v) for k, v in pruned.items()}

    def _checkpoint_key_map(self, checkpoint_keys: set[str]) -> dict[str, str]:
        renamed = LEGACY_NAMES.rename_all(checkpoint_keys)
        # The MLM output bias has two names that hold the same values; a file with only one fills both.
        for key in list(renamed):
            if key.endswith("cls.predictions.decoder.bias"):
                renamed.setdefault(key.replace("decoder.bias", "bias"), renamed[key])
            elif key.endswith("cls.predictions.bias"):
                renamed.setdefault(key.replace("predictions.bias", "predictions.decoder.bias"), renamed[key])
        mapping = super()._checkpoint_key_map(set(renamed))
        return {name: renamed[key] for name, key in mapping.items()}


def _layer_head_masks(head_mask: Any, layers: int, heads: int) -> list[torch.Tensor | None]:
    """``head_mask`` of shape ``(heads,)`` (every layer) or ``(layers, heads)``: 1 keeps a head, 0 silences it."""
    if head_mask is None:
        return [None] * layers
    mask = torch.as_tensor(head_mask)
    if mask.dim() == 1 and mask.shape[0] == heads:
        mask = mask.expand(layers, heads)
    if tuple(mask.shape) != (layers, heads):
        raise BertInputError(
            f"head_mask has shape {tuple(mask.shape)}; pass ({heads},) for every layer or ({layers}, {heads}), "
            "1.0 to keep a head and 0.0 to mask it (indices of the original, unpruned heads)"
        )
    return list(mask)


def _check_inputs(model: nn.Module, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> None:
    if (input_ids is None) == (inputs_embeds is None):
        raise BertInputError(f"{type(model).__name__}.forward needs exactly one of input_ids or inputs_embeds")


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
        config = self.config
        _check_inputs(self, input_ids, inputs_embeds)
        head_masks = _layer_head_masks(head_mask, config.num_hidden_layers, config.num_attention_heads)
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = config.return_dict if return_dict is None else return_dict

        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        length = hidden_states.shape[1]
        if attention_mask is not None and attention_mask.dim() == 2 and attention_mask.shape[-1] != length:
            raise BertInputError(
                f"attention_mask has {attention_mask.shape[-1]} columns but the input has {length} tokens; "
                "pass the mask the tokenizer returned with these input_ids"
            )
        mask, _ = build_attention_mask(attention_mask, length, 0, causal=False, device=hidden_states.device)
        attention_fn = get_attention_function(config)

        all_hidden_states: list[torch.Tensor] = [hidden_states]
        all_attentions: list[torch.Tensor] = []
        for layer, layer_head_mask in zip(self.encoder.layer, head_masks):
            hidden_states, weights = self._call_layer(
                layer, hidden_states, mask, attention_fn, output_attentions, layer_head_mask
            )
            all_hidden_states.append(hidden_states)
            if output_attentions:
                all_attentions.append(weights)
        pooled = self.pooler(hidden_states) if self.pooler is not None else None
        output = BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=hidden_states,
            pooler_output=pooled,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
        )
        return output if return_dict else output.to_tuple()


class _BertHead(BertPreTrainedModel):
    """Shared plumbing of the heads: run ``self.bert`` with the caller's encoder arguments."""

    def get_input_embeddings(self) -> nn.Module:
        return self.bert.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.bert.embeddings.word_embeddings = value

    def _encode(self, **encoder_kwargs: Any) -> BaseModelOutputWithPoolingAndCrossAttentions:
        return self.bert(**encoder_kwargs, return_dict=True)

    def _finish(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


def _encoder_kwargs(
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    output_attentions: bool | None,
    output_hidden_states: bool | None,
) -> dict[str, Any]:
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
        "position_ids": position_ids,
        "inputs_embeds": inputs_embeds,
        "output_attentions": output_attentions,
        "output_hidden_states": output_hidden_states,
    }


class BertForMaskedLM(_BertHead):
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
    ) -> MaskedLMOutput | tuple[Any, ...]:
        encoded = self._encode(
            head_mask=kwargs.pop("head_mask", None),
            **_encoder_kwargs(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                output_hidden_states,
            )
        )  # fmt: skip
        logits = self.cls.predictions(encoded.last_hidden_state)
        loss = token_cross_entropy(logits, labels) if labels is not None else None
        output = MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return self._finish(output, return_dict)


class BertForNextSentencePrediction(_BertHead):
    """Encoder, pooler and the two-way "is sentence B the continuation of A" classifier."""

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
        **kwargs: Any,
    ) -> NextSentencePredictorOutput | tuple[Any, ...]:
        encoded = self._encode(
            head_mask=kwargs.pop("head_mask", None),
            **_encoder_kwargs(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                output_hidden_states,
            )
        )  # fmt: skip
        logits = self.cls.seq_relationship(encoded.pooler_output)
        loss = token_cross_entropy(logits, labels) if labels is not None else None
        output = NextSentencePredictorOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return self._finish(output, return_dict)


class BertForPreTraining(_BertHead):
    """Encoder with both pre-training heads (masked LM and next sentence prediction)."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

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
        encoded = self._encode(
            head_mask=kwargs.pop("head_mask", None),
            **_encoder_kwargs(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                output_hidden_states,
            )
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


def _classifier_dropout(config: BertConfig) -> float:
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


class BertForSequenceClassification(_BertHead):
    """Pooled [CLS] state, dropout and a linear classifier; the loss follows ``config.problem_type``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
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
        **kwargs: Any,
    ) -> SequenceClassifierOutput | tuple[Any, ...]:
        encoded = self._encode(
            head_mask=kwargs.pop("head_mask", None),
            **_encoder_kwargs(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                output_hidden_states,
            )
        )  # fmt: skip
        logits = self.classifier(self.dropout(encoded.pooler_output))
        loss = sequence_classification_loss(logits, labels, self.config) if labels is not None else None
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return self._finish(output, return_dict)


class BertForTokenClassification(_BertHead):
    """Per-token linear classifier (NER and friends); ``labels`` of ``-100`` are not scored."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(_classifier_dropout(config))
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
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[Any, ...]:
        encoded = self._encode(
            head_mask=kwargs.pop("head_mask", None),
            **_encoder_kwargs(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                output_hidden_states,
            )
        )  # fmt: skip
        logits = self.classifier(self.dropout(encoded.last_hidden_state))
        loss = token_cross_entropy(logits, labels) if labels is not None else None
        output = TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return self._finish(output, return_dict)


class BertForQuestionAnswering(_BertHead):
    """Extractive QA: per-token start and end logits (``qa_outputs`` has ``num_labels`` = 2 outputs)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        if config.num_labels != 2:
            raise ConfigError(
                f"BertForQuestionAnswering needs num_labels=2 (start and end logits), the config has "
                f"{config.num_labels}; drop num_labels/id2label from the config or set num_labels=2"
            )
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
        **kwargs: Any,
    ) -> QuestionAnsweringModelOutput | tuple[Any, ...]:
        encoded = self._encode(
            head_mask=kwargs.pop("head_mask", None),
            **_encoder_kwargs(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                output_hidden_states,
            )
        )  # fmt: skip
        start_logits, end_logits = self.qa_outputs(encoded.last_hidden_state).split(1, dim=-1)
        start_logits, end_logits = start_logits.squeeze(-1).contiguous(), end_logits.squeeze(-1).contiguous()
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

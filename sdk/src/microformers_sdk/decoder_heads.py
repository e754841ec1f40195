"""Heads that decoder-only model plugins put on their decoder.

A plugin's ``XForCausalLM`` / ``XForSequenceClassification`` lists one of these mixins first and its own
``XPreTrainedModel`` second, and names its decoder class in ``base_model_class``::

    class XForSequenceClassification(DecoderForSequenceClassification, XPreTrainedModel):
        base_model_class = XModel

The decoder is built into the attribute named by ``decoder_attribute`` (``"model"``, so checkpoint names
stay ``model.*``); the heads are ``lm_head`` and ``score``.

- :class:`DecoderHead`: input-embedding accessors through the decoder.
- :class:`DecoderForCausalLM`: builds decoder + ``lm_head``, output-embedding accessors and
  ``make_static_cache``; the plugin writes ``forward`` (or uses :class:`MoeDecoderForCausalLM`).
- :class:`MoeDecoderForCausalLM`: the whole causal-LM ``forward`` of a mixture-of-experts decoder,
  load-balancing loss included.
- :class:`DecoderForSequenceClassification`: the decoder plus a ``score`` head read at each row's last
  non-padding token.
- :class:`MoeDecoderModel`: the layer loop of a mixture-of-experts decoder stack (masks per sliding
  window, router logits collected), for a model with ``embed_tokens``, ``layers``, ``norm``, ``rotary_emb``.
- :func:`keep_logits_positions`: the ``logits_to_keep`` slicing every causal-LM head shares.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers.errors import InputError

from .attention import get_attention_function
from .cache import Cache, StaticCache
from .inputs import prepare_decoder_inputs
from .layers import apply_linear
from .losses import causal_lm_loss, sequence_classification_loss
from .masks import build_attention_mask, last_token_indices
from .moe import load_balancing_loss
from .outputs import MoeCausalLMOutputWithPast, MoeModelOutputWithPast, SequenceClassifierOutputWithPast

__all__ = [
    "DecoderForCausalLM",
    "DecoderForSequenceClassification",
    "DecoderHead",
    "MoeDecoderForCausalLM",
    "MoeDecoderModel",
    "keep_logits_positions",
    "pool_last_tokens",
]


def keep_logits_positions(hidden_states: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """The positions a causal-LM head computes logits for, as the reference slices them.

    An int keeps the last ``n`` positions (``0``: all; a negative ``n`` drops the first ``-n``); a 1-D tensor keeps
    those positions in every row; a 2-D integer tensor ``(batch, k)`` keeps ``k`` positions per row; a 2-D boolean
    ``(batch, length)`` mask keeps its true positions, flattened to ``(number kept, hidden)`` (packed training).
    """
    if isinstance(logits_to_keep, int):
        return hidden_states[:, -logits_to_keep:]
    if logits_to_keep.ndim == 2 and logits_to_keep.dtype == torch.bool:
        return hidden_states[logits_to_keep]
    if logits_to_keep.ndim == 2:
        return torch.take_along_dim(hidden_states, logits_to_keep.unsqueeze(-1), dim=1)
    return hidden_states[:, logits_to_keep]


def pool_last_tokens(
    logits: torch.Tensor, input_ids: torch.Tensor | None, pad_token_id: int | None, owner: str
) -> torch.Tensor:
    """Each row's logits at its last non-padding token; ``owner`` names the model in the error for a batch without a pad id."""
    batch = logits.shape[0]
    if pad_token_id is None and batch != 1:
        raise InputError(
            f"{owner} needs config.pad_token_id to find the last token of each row in a batch of "
            f"{batch}; set model.config.pad_token_id (e.g. to the tokenizer's pad_token_id)"
        )
    last = last_token_indices(input_ids, pad_token_id, batch, logits.shape[1], logits.device)
    return logits[torch.arange(batch, device=logits.device), last]


class MoeDecoderModel:
    """Mixin: ``forward`` of a mixture-of-experts decoder stack; returns ``MoeModelOutputWithPast``.

    The plugin's model builds ``embed_tokens``, ``layers`` (each with ``self_attn.sliding_window``, ``None``
    for full attention, and returning ``(hidden, attention weights, router logits or None)``), ``norm`` and
    ``rotary_emb``. One mask is built per distinct window.
    """

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_router_logits: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> MoeModelOutputWithPast | tuple[Any, ...]:
        model: Any = self
        inputs = prepare_decoder_inputs(
            model,
            model.embed_tokens,
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=return_dict,
        )
        hidden_states, cache = inputs.inputs_embeds, inputs.cache
        if output_router_logits is None:
            output_router_logits = model.config.output_router_logits
        rotary = model.rotary_emb(inputs.position_ids, dtype=hidden_states.dtype)
        masks = {
            window: build_attention_mask(
                attention_mask,
                hidden_states.shape[1],
                inputs.past_length,
                sliding_window=window,
                device=hidden_states.device,
            )
            for window in {layer.self_attn.sliding_window for layer in model.layers}
        }
        attention_fn = get_attention_function(model.config)
        all_hidden: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor | None] = []
        all_router_logits: list[torch.Tensor] = []
        for layer in model.layers:
            if inputs.output_hidden_states:
                all_hidden.append(hidden_states)
            mask = masks[layer.self_attn.sliding_window]
            hidden_states, weights, router_logits = model._call_layer(
                layer, hidden_states, rotary, mask, cache, attention_fn, inputs.output_attentions
            )
            all_attentions.append(weights)
            if router_logits is not None:  # dense layers route nothing
                all_router_logits.append(router_logits)
        hidden_states = model.norm(hidden_states)
        if inputs.output_hidden_states:
            all_hidden.append(hidden_states)
        output = MoeModelOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=cache if inputs.use_cache else None,
            hidden_states=tuple(all_hidden) if inputs.output_hidden_states else None,
            attentions=tuple(all_attentions) if inputs.output_attentions else None,
            router_logits=tuple(all_router_logits) if output_router_logits else None,
        )
        return output if inputs.return_dict else output.to_tuple()


class DecoderHead:
    """Mixin for a head over a decoder held in ``decoder_attribute`` (built from ``base_model_class``)."""

    base_model_class: ClassVar[type[nn.Module]]
    decoder_attribute: ClassVar[str] = "model"

    def _build_decoder(self, config: Any) -> None:
        setattr(self, self.decoder_attribute, self.base_model_class(config))

    def get_input_embeddings(self) -> nn.Module:
        return getattr(self, self.decoder_attribute).embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        getattr(self, self.decoder_attribute).set_input_embeddings(value)


class DecoderForCausalLM(DecoderHead):
    """Mixin: the decoder plus a bias-free ``lm_head`` over the vocabulary."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)  # type: ignore[call-arg]  # the plugin's PreTrainedModel, next in the MRO
        self._build_decoder(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()  # type: ignore[attr-defined]

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head = value

    def make_static_cache(self, max_cache_len: int) -> StaticCache:
        """A :class:`~microformers_sdk.cache.StaticCache` for ``max_cache_len`` positions (``cache_implementation="static"``)."""
        return StaticCache(self.config, max_cache_len=max_cache_len)  # type: ignore[attr-defined]


class MoeDecoderForCausalLM(DecoderForCausalLM):
    """Mixin: a mixture-of-experts causal LM; reports the load-balancing loss with ``output_router_logits``.

    ``num_experts_attribute`` names the config field holding the expert count.
    """

    num_experts_attribute: ClassVar[str] = "num_experts"

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_router_logits: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> MoeCausalLMOutputWithPast | tuple[Any, ...]:
        """``logits_to_keep=n`` computes logits for the last ``n`` positions only (0: all); a tensor picks positions."""
        config = self.config  # type: ignore[attr-defined]
        return_dict = config.return_dict if return_dict is None else return_dict
        if output_router_logits is None:
            output_router_logits = config.output_router_logits
        outputs = getattr(self, self.decoder_attribute)(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            output_router_logits=output_router_logits,
            return_dict=True,
        )
        logits = apply_linear(self.lm_head, keep_logits_positions(outputs.last_hidden_state, logits_to_keep))
        loss = causal_lm_loss(logits, labels, kwargs.get("num_items_in_batch")) if labels is not None else None
        aux_loss = None
        if output_router_logits:
            num_experts = getattr(config, self.num_experts_attribute)
            aux_loss = load_balancing_loss(
                outputs.router_logits, num_experts, config.num_experts_per_tok, attention_mask
            )
            if loss is not None:
                loss = loss + config.router_aux_loss_coef * aux_loss.to(loss.device)
        output = MoeCausalLMOutputWithPast(
            loss=loss,
            aux_loss=aux_loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            router_logits=outputs.router_logits,
        )
        return output if return_dict else output.to_tuple()


class DecoderForSequenceClassification(DecoderHead):
    """Mixin: the decoder plus a linear ``score`` head read at each row's last non-padding token.

    ``decoder_call_kwargs`` are extra arguments for the decoder call (MoE decoders: ``output_router_logits=False``).
    """

    decoder_call_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(self, config: Any) -> None:
        super().__init__(config)  # type: ignore[call-arg]  # the plugin's PreTrainedModel, next in the MRO
        self.num_labels = config.num_labels
        self._build_decoder(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()  # type: ignore[attr-defined]

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutputWithPast | tuple[Any, ...]:
        config = self.config  # type: ignore[attr-defined]
        return_dict = config.return_dict if return_dict is None else return_dict
        outputs = getattr(self, self.decoder_attribute)(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **self.decoder_call_kwargs,
        )
        logits = apply_linear(self.score, outputs.last_hidden_state)
        pooled = pool_last_tokens(logits, input_ids, config.pad_token_id, type(self).__name__)
        loss = sequence_classification_loss(pooled, labels, config) if labels is not None else None
        output = SequenceClassifierOutputWithPast(
            loss=loss,
            logits=pooled,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return output if return_dict else output.to_tuple()

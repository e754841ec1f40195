"""Task-specific model outputs (``CausalLMOutputWithPast`` ...): the fields the reference returns.

``ModelOutput`` itself (attribute / key / position access) is the kernel's; these are the shapes
plugins build on.
"""

from __future__ import annotations

from typing import Any

import torch

from microformers.outputs import ModelOutput


class _OutputWithCache(ModelOutput):
    """An output that may hold a KV cache (``past_key_values``). While ``torch.jit.trace`` records the forward,
    ``to_tuple()`` gives the cache as ``((keys, values), ...)`` per layer, a form a traced graph can return
    (and take back as ``past_key_values``); a cache object is not."""

    def to_tuple(self) -> tuple[Any, ...]:
        values = super().to_tuple()
        if not torch.jit.is_tracing():
            return values
        return tuple(value.to_legacy_cache() if hasattr(value, "to_legacy_cache") else value for value in values)


class BaseModelOutput(ModelOutput):
    last_hidden_state: Any
    hidden_states: Any
    attentions: Any


class BaseModelOutputWithPast(_OutputWithCache):
    last_hidden_state: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any


class BaseModelOutputWithPooling(ModelOutput):
    last_hidden_state: Any
    pooler_output: Any
    hidden_states: Any
    attentions: Any


class BaseModelOutputWithPastAndCrossAttentions(_OutputWithCache):
    last_hidden_state: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any
    cross_attentions: Any


class BaseModelOutputWithPoolingAndCrossAttentions(_OutputWithCache):
    last_hidden_state: Any
    pooler_output: Any
    hidden_states: Any
    past_key_values: Any
    attentions: Any
    cross_attentions: Any


class CausalLMOutput(ModelOutput):
    loss: Any
    logits: Any
    hidden_states: Any
    attentions: Any


class CausalLMOutputWithPast(_OutputWithCache):
    loss: Any
    logits: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any


class CausalLMOutputWithCrossAttentions(_OutputWithCache):
    loss: Any
    logits: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any
    cross_attentions: Any


class MaskedLMOutput(ModelOutput):
    loss: Any
    logits: Any
    hidden_states: Any
    attentions: Any


class SequenceClassifierOutput(ModelOutput):
    loss: Any
    logits: Any
    hidden_states: Any
    attentions: Any


class SequenceClassifierOutputWithPast(_OutputWithCache):
    loss: Any
    logits: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any


class TokenClassifierOutput(ModelOutput):
    loss: Any
    logits: Any
    hidden_states: Any
    attentions: Any


class QuestionAnsweringModelOutput(ModelOutput):
    loss: Any
    start_logits: Any
    end_logits: Any
    hidden_states: Any
    attentions: Any


class NextSentencePredictorOutput(ModelOutput):
    loss: Any
    logits: Any
    hidden_states: Any
    attentions: Any


class MoeModelOutputWithPast(_OutputWithCache):
    """A mixture-of-experts decoder's output: ``router_logits`` holds one ``(tokens, experts)`` tensor per MoE layer."""

    last_hidden_state: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any
    router_logits: Any


class MoeCausalLMOutputWithPast(_OutputWithCache):
    """``aux_loss`` is the load-balancing loss (already added to ``loss``, times its coefficient, when labels are given)."""

    loss: Any
    aux_loss: Any
    logits: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any
    router_logits: Any


class Seq2SeqModelOutput(_OutputWithCache):
    """An encoder-decoder's output: the decoder's states first, then the encoder's."""

    last_hidden_state: Any
    past_key_values: Any
    decoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    encoder_last_hidden_state: Any
    encoder_hidden_states: Any
    encoder_attentions: Any


class Seq2SeqLMOutput(_OutputWithCache):
    loss: Any
    logits: Any
    past_key_values: Any
    decoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    encoder_last_hidden_state: Any
    encoder_hidden_states: Any
    encoder_attentions: Any


class Seq2SeqSequenceClassifierOutput(_OutputWithCache):
    loss: Any
    logits: Any
    past_key_values: Any
    decoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    encoder_last_hidden_state: Any
    encoder_hidden_states: Any
    encoder_attentions: Any


class Seq2SeqQuestionAnsweringModelOutput(_OutputWithCache):
    loss: Any
    start_logits: Any
    end_logits: Any
    past_key_values: Any
    decoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    encoder_last_hidden_state: Any
    encoder_hidden_states: Any
    encoder_attentions: Any


class MultipleChoiceModelOutput(ModelOutput):
    """``logits`` ``(batch, num_choices)``: one score per choice; ``loss`` the cross-entropy over the choices."""

    loss: Any
    logits: Any
    hidden_states: Any
    attentions: Any

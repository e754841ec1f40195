"""Task-specific model outputs (``CausalLMOutputWithPast`` ...): the fields the reference returns.

``ModelOutput`` itself (attribute / key / position access) is the kernel's; these are the shapes
plugins build on.
"""

from __future__ import annotations

from typing import Any

from microformers.outputs import ModelOutput


class BaseModelOutput(ModelOutput):
    last_hidden_state: Any
    hidden_states: Any
    attentions: Any


class BaseModelOutputWithPast(ModelOutput):
    last_hidden_state: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any


class BaseModelOutputWithPooling(ModelOutput):
    last_hidden_state: Any
    pooler_output: Any
    hidden_states: Any
    attentions: Any


class BaseModelOutputWithPastAndCrossAttentions(ModelOutput):
    last_hidden_state: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any
    cross_attentions: Any


class BaseModelOutputWithPoolingAndCrossAttentions(ModelOutput):
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


class CausalLMOutputWithPast(ModelOutput):
    loss: Any
    logits: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any


class CausalLMOutputWithCrossAttentions(ModelOutput):
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


class SequenceClassifierOutputWithPast(ModelOutput):
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


class MoeModelOutputWithPast(ModelOutput):
    """A mixture-of-experts decoder's output: ``router_logits`` holds one ``(tokens, experts)`` tensor per MoE layer."""

    last_hidden_state: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any
    router_logits: Any


class MoeCausalLMOutputWithPast(ModelOutput):
    """``aux_loss`` is the load-balancing loss (already added to ``loss``, times its coefficient, when labels are given)."""

    loss: Any
    aux_loss: Any
    logits: Any
    past_key_values: Any
    hidden_states: Any
    attentions: Any
    router_logits: Any


class Seq2SeqModelOutput(ModelOutput):
    """An encoder-decoder's output: the decoder's states first, then the encoder's."""

    last_hidden_state: Any
    past_key_values: Any
    decoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    encoder_last_hidden_state: Any
    encoder_hidden_states: Any
    encoder_attentions: Any


class Seq2SeqLMOutput(ModelOutput):
    loss: Any
    logits: Any
    past_key_values: Any
    decoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    encoder_last_hidden_state: Any
    encoder_hidden_states: Any
    encoder_attentions: Any


class Seq2SeqSequenceClassifierOutput(ModelOutput):
    loss: Any
    logits: Any
    past_key_values: Any
    decoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    encoder_last_hidden_state: Any
    encoder_hidden_states: Any
    encoder_attentions: Any


class Seq2SeqQuestionAnsweringModelOutput(ModelOutput):
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

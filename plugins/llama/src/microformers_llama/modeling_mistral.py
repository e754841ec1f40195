"""Mistral: the Llama decoder with sliding-window attention (the window comes from ``MistralConfig``)."""

from __future__ import annotations

from typing import ClassVar

from .configuration_mistral import MistralConfig
from .modeling_llama import LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel

__all__ = ["MistralConfig", "MistralForCausalLM", "MistralForSequenceClassification", "MistralModel"]


class MistralModel(LlamaModel):
    config_class = MistralConfig


class MistralForCausalLM(LlamaForCausalLM):
    config_class = MistralConfig
    base_model_class: ClassVar[type[LlamaModel]] = MistralModel


class MistralForSequenceClassification(LlamaForSequenceClassification):
    config_class = MistralConfig
    base_model_class: ClassVar[type[LlamaModel]] = MistralModel

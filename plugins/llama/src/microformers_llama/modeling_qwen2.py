"""Qwen2: the Llama decoder with biased q/k/v projections and per-layer sliding windows (see ``Qwen2Config``)."""

from __future__ import annotations

from typing import ClassVar

from .configuration_qwen2 import Qwen2Config
from .modeling_llama import LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel

__all__ = ["Qwen2Config", "Qwen2ForCausalLM", "Qwen2ForSequenceClassification", "Qwen2Model"]


class Qwen2Model(LlamaModel):
    config_class = Qwen2Config


class Qwen2ForCausalLM(LlamaForCausalLM):
    config_class = Qwen2Config
    base_model_class: ClassVar[type[LlamaModel]] = Qwen2Model


class Qwen2ForSequenceClassification(LlamaForSequenceClassification):
    config_class = Qwen2Config
    base_model_class: ClassVar[type[LlamaModel]] = Qwen2Model

"""Qwen3 (dense): the Llama-family decoder whose attention RMS-normalises every query and key head.

Parameter names equal the reference checkpoint's (``model.layers.{i}.self_attn.q_norm.weight`` and
``k_norm.weight`` of size ``head_dim`` next to Llama's ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj``),
so files load and save unchanged.

Everything but the projection step is the Llama decoder of ``microformers-llama`` (rotary positions,
grouped-query attention, per-layer sliding windows, dynamic and static caches, compiled decode steps,
the causal-LM and sequence-classification heads): ``Qwen3Attention.project`` adds the two norms
after the q/k projections and before rotary, and the classes below plug it into that decoder.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from microformers_sdk.layers import RMSNorm

from .configuration_qwen3 import Qwen3Config
from .modeling_llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    LlamaModel,
)

__all__ = [
    "Qwen3Attention",
    "Qwen3Config",
    "Qwen3DecoderLayer",
    "Qwen3ForCausalLM",
    "Qwen3ForSequenceClassification",
    "Qwen3Model",
]


class Qwen3Attention(LlamaAttention):
    """Llama attention plus ``q_norm`` / ``k_norm``: RMSNorm over ``head_dim`` of each head, before rotary."""

    def __init__(self, config: Qwen3Config, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        query, key, value = super().project(hidden_states)
        return self.q_norm(query), self.k_norm(key), value


class Qwen3DecoderLayer(LlamaDecoderLayer):
    attention_class: ClassVar[type[LlamaAttention]] = Qwen3Attention


class Qwen3Model(LlamaModel):
    config_class = Qwen3Config
    layer_class: ClassVar[type[LlamaDecoderLayer]] = Qwen3DecoderLayer
    _no_split_modules: ClassVar[list[str]] = ["Qwen3DecoderLayer"]


class Qwen3ForCausalLM(LlamaForCausalLM):
    config_class = Qwen3Config
    base_model_class: ClassVar[type[LlamaModel]] = Qwen3Model
    _no_split_modules: ClassVar[list[str]] = ["Qwen3DecoderLayer"]


class Qwen3ForSequenceClassification(LlamaForSequenceClassification):
    config_class = Qwen3Config
    base_model_class: ClassVar[type[LlamaModel]] = Qwen3Model
    _no_split_modules: ClassVar[list[str]] = ["Qwen3DecoderLayer"]

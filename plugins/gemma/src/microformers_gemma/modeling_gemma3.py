"""Gemma 3 (text): the Gemma 2 decoder of this plugin with per-head q/k norms and two rotary bases.

Parameter names equal the reference checkpoint's: Gemma 2's (see ``modeling_gemma2``) plus
``model.layers.{i}.self_attn.q_norm.weight`` and ``k_norm.weight`` (size ``head_dim``, ``(1 + weight)``
RMSNorm over each query/key head, applied before rotary).

Differences from Gemma 2, all in the classes below:

* ``Gemma3Attention.project`` normalises each query and key head; attention scores are not
  soft-capped (the reference's Gemma 3 attention ignores ``attn_logit_softcapping``);
* local (``sliding_attention``) layers rotate with ``rope_parameters["sliding_attention"]``
  (``rope_local_base_freq``, 10 000 by default), global ones with ``rope_parameters["full_attention"]``
  (``rope_theta`` 1 000 000 and any ``rope_scaling``), so ``Gemma3TextModel`` computes two tables.

Everything else (scaled embeddings, pre/post norms, GeGLU, per-window masks, caches, the heads and the
final-logit soft-capping when configured) is Gemma 2's.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from microformers_sdk.layers import OffsetRMSNorm
from microformers_sdk.rotary import RotaryEmbedding

from .configuration_gemma2 import FULL, SLIDING
from .configuration_gemma3 import Gemma3TextConfig
from .modeling_gemma2 import (
    Gemma2Attention,
    Gemma2DecoderLayer,
    Gemma2ForCausalLM,
    Gemma2ForSequenceClassification,
    Gemma2Model,
    Rotary,
)

__all__ = [
    "Gemma3Attention",
    "Gemma3DecoderLayer",
    "Gemma3ForCausalLM",
    "Gemma3TextConfig",
    "Gemma3TextForSequenceClassification",
    "Gemma3TextModel",
]


class Gemma3Attention(Gemma2Attention):
    """Gemma 2 attention plus ``q_norm`` / ``k_norm`` over ``head_dim`` of each head, and no score soft-capping."""

    def __init__(self, config: Gemma3TextConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        self.q_norm = OffsetRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = OffsetRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    @staticmethod
    def score_softcap(config: Gemma3TextConfig) -> float | None:
        return None

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        query, key, value = super().project(hidden_states)
        return self.q_norm(query), self.k_norm(key), value


class Gemma3DecoderLayer(Gemma2DecoderLayer):
    attention_class: ClassVar[type[Gemma2Attention]] = Gemma3Attention


class Gemma3TextModel(Gemma2Model):
    config_class = Gemma3TextConfig
    layer_class: ClassVar[type[Gemma2DecoderLayer]] = Gemma3DecoderLayer
    _no_split_modules: ClassVar[list[str]] = ["Gemma3DecoderLayer"]

    def build_rotary(self, config: Gemma3TextConfig) -> None:
        """Global layers: ``rotary_emb``; local layers: ``rotary_emb_local`` (its own base frequency)."""
        self.rotary_emb = RotaryEmbedding(config.rope_settings(FULL))
        self.rotary_emb_local = RotaryEmbedding(config.rope_settings(SLIDING))

    def rotary_tables(self, position_ids: torch.Tensor, dtype: torch.dtype) -> dict[str, Rotary]:
        present = set(self.config.layer_types)
        modules: dict[str, nn.Module] = {FULL: self.rotary_emb, SLIDING: self.rotary_emb_local}
        return {layer_type: modules[layer_type](position_ids, dtype=dtype) for layer_type in present}


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    config_class = Gemma3TextConfig
    base_model_class: ClassVar[type[Gemma2Model]] = Gemma3TextModel
    _no_split_modules: ClassVar[list[str]] = ["Gemma3DecoderLayer"]


class Gemma3TextForSequenceClassification(Gemma2ForSequenceClassification):
    config_class = Gemma3TextConfig
    base_model_class: ClassVar[type[Gemma2Model]] = Gemma3TextModel
    _no_split_modules: ClassVar[list[str]] = ["Gemma3DecoderLayer"]

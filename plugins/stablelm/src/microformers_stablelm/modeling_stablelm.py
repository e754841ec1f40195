"""StableLM decoder (``model_type: stablelm``): the Llama decoder of ``microformers-llama`` with LayerNorm, partial
rotary positions and StableLM's options.

Parameter names equal the checkpoint tensor names of the reference implementation
(``model.embed_tokens.weight``, ``model.layers.{i}.input_layernorm.{weight,bias}``,
``model.layers.{i}.self_attn.{q,k,v}_proj.{weight,bias}``, ``model.layers.{i}.self_attn.o_proj.weight``,
``model.layers.{i}.self_attn.{q,k}_layernorm.norms.{h}.weight``, ``model.layers.{i}.post_attention_layernorm.*``,
``model.layers.{i}.mlp.{gate,up,down}_proj.weight``, ``model.norm.{weight,bias}``, ``lm_head.weight``,
``score.weight``), so files load and save without renaming.

What differs from Llama, top to bottom: q/k/v carry biases when ``use_qkv_bias``; with ``qk_layernorm``
each query and key head has its own bias-free LayerNorm, applied before the rotation
(``StableLmAttention.project``); only the first ``partial_rotary_factor`` of each head is rotated (the
SDK's rotary tables are that wide); norms are LayerNorms with a bias (``layer_norm_eps``); with
``use_parallel_residual`` a layer is ``x + attn(ln(x)) + mlp(ln(x))`` (one norm), else the usual two
sequential residuals; ``hidden_dropout`` applies to the MLP output in training. The rest of one forward
pass (masks, KV caches, static steps, the SDPA/eager attention choice, ``generate``) is Llama's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from microformers_llama import (
    LlamaAttention,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    LlamaModel,
    LlamaPreTrainedModel,
)
from microformers_sdk.cache import Cache
from microformers_sdk.layers import GatedMLP
from microformers_sdk.rotary import RotaryEmbedding, rope_settings_from_config

from .configuration_stablelm import StableLmConfig

__all__ = [
    "StableLmAttention",
    "StableLmConfig",
    "StableLmDecoderLayer",
    "StableLmForCausalLM",
    "StableLmForSequenceClassification",
    "StableLmLayerNormPerHead",
    "StableLmModel",
    "StableLmPreTrainedModel",
]


class StableLmLayerNormPerHead(nn.Module):
    """One bias-free LayerNorm per head over ``(batch, heads, seq, head_dim)`` (``norms.{h}.weight``)."""

    def __init__(self, head_dim: int, num_heads: int, eps: float) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(head_dim, eps=eps, bias=False) for _ in range(num_heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.layer_norm(x, (x.shape[-1],), eps=self.norms[0].eps)
        weight = torch.stack([norm.weight for norm in self.norms])  # (heads, head_dim)
        return normed * weight[None, :, None, :].to(normed.dtype)


class StableLmAttention(LlamaAttention):
    """Llama's grouped-query self-attention (partial rotary through the tables' width), q/k/v biases when
    ``use_qkv_bias``, a bias-free output projection and optional per-head q/k LayerNorm."""

    def __init__(self, config: StableLmConfig, layer_idx: int) -> None:
        nn.Module.__init__(self)  # not LlamaAttention.__init__: it reads Llama's config fields
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.sliding_window = None
        hidden, bias = config.hidden_size, config.use_qkv_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)
        self.qk_layernorm = bool(config.qk_layernorm)
        if self.qk_layernorm:
            self.q_layernorm = StableLmLayerNormPerHead(self.head_dim, self.num_heads, config.layer_norm_eps)
            self.k_layernorm = StableLmLayerNormPerHead(self.head_dim, self.num_key_value_heads, config.layer_norm_eps)

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value heads ``(batch, heads, seq, head_dim)``, q/k normalised per head when configured."""
        query, key, value = super().project(hidden_states)
        if self.qk_layernorm:
            query, key = self.q_layernorm(query), self.k_layernorm(key)
        return query, key, value


class StableLmDecoderLayer(nn.Module):
    """Parallel (``x + attn(ln(x)) + dropout(mlp(ln(x)))``) or sequential (``x + attn(ln1(x))``, then
    ``x + dropout(mlp(ln2(x)))``) residual block."""

    def __init__(self, config: StableLmConfig, layer_idx: int) -> None:
        super().__init__()
        self.use_parallel_residual = bool(config.use_parallel_residual)
        self.self_attn = StableLmAttention(config, layer_idx)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        if not self.use_parallel_residual:
            self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.hidden_dropout = float(config.hidden_dropout or 0.0)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
        cache_position: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        normed = self.input_layernorm(hidden_states)
        attended, weights = self.self_attn(
            normed, rotary, attention_mask, is_causal, past_key_values, attention_fn, output_attentions, cache_position
        )
        if self.use_parallel_residual:
            return hidden_states + attended + self._dropout(self.mlp(normed)), weights
        hidden_states = hidden_states + attended
        return hidden_states + self._dropout(self.mlp(self.post_attention_layernorm(hidden_states))), weights

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.hidden_dropout, training=True) if self.training and self.hidden_dropout > 0 else x


class StableLmPreTrainedModel(LlamaPreTrainedModel):
    config_class = StableLmConfig
    _no_split_modules: ClassVar[list[str]] = ["StableLmDecoderLayer"]


class StableLmModel(LlamaModel, StableLmPreTrainedModel):
    """The decoder stack without a head (Llama's forward over StableLM layers); returns ``BaseModelOutputWithPast``."""

    layer_class: ClassVar[type[nn.Module]] = StableLmDecoderLayer

    def __init__(self, config: StableLmConfig) -> None:
        StableLmPreTrainedModel.__init__(self, config)  # not LlamaModel.__init__: its final norm is an RMSNorm
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.rotary_emb = RotaryEmbedding(rope_settings_from_config(config, head_dim=config.head_dim))
        self.post_init()


class StableLmForCausalLM(LlamaForCausalLM, StableLmPreTrainedModel):
    """Decoder plus a language-modelling head (``lm_head``, tied to the embeddings when configured)."""

    base_model_class: ClassVar[type[nn.Module]] = StableLmModel


class StableLmForSequenceClassification(LlamaForSequenceClassification, StableLmPreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[nn.Module]] = StableLmModel

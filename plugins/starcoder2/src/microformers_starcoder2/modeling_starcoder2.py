"""StarCoder2 decoder (``model_type: starcoder2``): the Llama decoder of ``microformers-llama`` with LayerNorm,
biased projections and a plain GELU MLP.

Parameter names equal the checkpoint tensor names of the reference implementation
(``model.embed_tokens.weight``, ``model.layers.{i}.input_layernorm.weight``/``.bias``,
``model.layers.{i}.self_attn.{q,k,v,o}_proj.weight``/``.bias``, ``model.layers.{i}.post_attention_layernorm.*``,
``model.layers.{i}.mlp.c_fc.*``, ``model.layers.{i}.mlp.c_proj.*``, ``model.norm.*``, ``lm_head.weight``,
``score.weight``), so files load and save without renaming.

What differs from Llama, top to bottom: every linear layer carries a bias when ``use_bias`` is set
(``Starcoder2Attention``, ``Starcoder2MLP``); the MLP is ``c_proj(act(c_fc(x)))`` with the tanh GELU;
norms are LayerNorms with a bias (``norm_epsilon``); dropout applies to the embeddings
(``embedding_dropout``) and to each residual branch (``residual_dropout``) in training; one
``sliding_window`` (or none) applies to every layer. The rest of one forward pass (rotary tables,
masks per window, KV caches, static steps, the SDPA/eager attention choice, ``generate``) is Llama's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
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
from microformers_sdk.decode_steps import LayerInputs
from microformers_sdk.inputs import DecoderInputs
from microformers_sdk.layers import apply_linear, get_activation
from microformers_sdk.rotary import RotaryEmbedding, rope_settings_from_config

from .configuration_starcoder2 import Starcoder2Config

__all__ = [
    "Starcoder2Attention",
    "Starcoder2Config",
    "Starcoder2DecoderLayer",
    "Starcoder2ForCausalLM",
    "Starcoder2ForSequenceClassification",
    "Starcoder2MLP",
    "Starcoder2Model",
    "Starcoder2PreTrainedModel",
]


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    return F.dropout(x, p, training=True) if training and p > 0 else x


class Starcoder2Attention(LlamaAttention):
    """Llama's grouped-query self-attention with rotary positions; q/k/v/o carry biases when ``use_bias``."""

    def __init__(self, config: Starcoder2Config, layer_idx: int) -> None:
        nn.Module.__init__(self)  # not LlamaAttention.__init__: it reads Llama's config fields
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.sliding_window = config.sliding_window
        hidden, bias = config.hidden_size, config.use_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)


class Starcoder2MLP(nn.Module):
    """``c_proj(act(c_fc(x)))`` (no gate)."""

    def __init__(self, config: Starcoder2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.use_bias)
        self.c_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.use_bias)
        self.act = get_activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_linear(self.c_proj, self.act(apply_linear(self.c_fc, x)))


class Starcoder2DecoderLayer(nn.Module):
    """Pre-norm block: ``x + dropout(attn(ln(x)))`` then ``x + dropout(mlp(ln(x)))``."""

    def __init__(self, config: Starcoder2Config, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = Starcoder2Attention(config, layer_idx)
        self.mlp = Starcoder2MLP(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        self.residual_dropout = float(config.residual_dropout or 0.0)

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
        attended, weights = self.self_attn(
            self.input_layernorm(hidden_states),
            rotary,
            attention_mask,
            is_causal,
            past_key_values,
            attention_fn,
            output_attentions,
            cache_position,
        )
        hidden_states = hidden_states + _dropout(attended, self.residual_dropout, self.training)
        mlp_out = self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states + _dropout(mlp_out, self.residual_dropout, self.training), weights


class Starcoder2PreTrainedModel(LlamaPreTrainedModel):
    config_class = Starcoder2Config
    _no_split_modules: ClassVar[list[str]] = ["Starcoder2DecoderLayer"]


class Starcoder2Model(LlamaModel, Starcoder2PreTrainedModel):
    """The decoder stack without a head (Llama's forward over StarCoder2 layers); returns ``BaseModelOutputWithPast``."""

    layer_class: ClassVar[type[nn.Module]] = Starcoder2DecoderLayer

    def __init__(self, config: Starcoder2Config) -> None:
        Starcoder2PreTrainedModel.__init__(self, config)  # not LlamaModel.__init__: its final norm is an RMSNorm
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        self.rotary_emb = RotaryEmbedding(rope_settings_from_config(config, head_dim=config.head_dim))
        self.embedding_dropout = float(config.embedding_dropout or 0.0)
        self.post_init()

    def prepare(self, *, attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[DecoderInputs, LayerInputs]:
        """Llama's inputs, with dropout on the embeddings in training."""
        inputs, layer_inputs = super().prepare(attention_mask=attention_mask, **kwargs)
        if self.training and self.embedding_dropout > 0:
            embeds = F.dropout(inputs.inputs_embeds, self.embedding_dropout, training=True)
            inputs = attrs.evolve(inputs, inputs_embeds=embeds)
        return inputs, layer_inputs


class Starcoder2ForCausalLM(LlamaForCausalLM, Starcoder2PreTrainedModel):
    """Decoder plus a language-modelling head (``lm_head``, tied to the embeddings by default)."""

    base_model_class: ClassVar[type[nn.Module]] = Starcoder2Model


class Starcoder2ForSequenceClassification(LlamaForSequenceClassification, Starcoder2PreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[nn.Module]] = Starcoder2Model

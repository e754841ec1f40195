"""Falcon decoder (``model_type: falcon``) over the Llama decoder of ``microformers-llama``.

Parameter names equal the checkpoint tensor names of the reference implementation
(``transformer.word_embeddings.weight``, ``transformer.h.{i}.self_attention.query_key_value.weight``,
``transformer.h.{i}.self_attention.dense.weight``, ``transformer.h.{i}.mlp.dense_h_to_4h.weight``,
``transformer.h.{i}.mlp.dense_4h_to_h.weight``, the norms ``input_layernorm`` / ``post_attention_layernorm``
or ``ln_attn`` / ``ln_mlp``, ``transformer.ln_f``, ``lm_head.weight``, ``score.weight``; biases when
``bias``), so files load and save without renaming.

Top to bottom: ``FalconAttention`` splits the fused ``query_key_value`` rows by layout (new decoder
architecture: per key/value group its query heads, then one key and one value head; multi-query: every
query head, then one shared key and value head; original: query, key, value per head) and keeps the key
and value heads unrepeated (the cache holds only them; grouped-query attention repeats them as the
reference's broadcast does); rotary positions over the whole head. ``FalconDecoderLayer`` runs attention
and MLP in parallel (``x + attn(ln(x)) + mlp(ln(x))``, two norms in the new architecture) or
sequentially (``parallel_attn: false``). ``FalconModel`` is Llama's forward (rotary tables, masks, KV
caches, static steps, the SDPA/eager attention choice) under Falcon's module names, which the
``embed_tokens`` / ``layers`` / ``norm`` / ``self_attn`` / ``o_proj`` properties expose to it.
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
from microformers_sdk.decode_steps import DecodeStepLayout
from microformers_sdk.layers import apply_linear, get_activation
from microformers_sdk.rotary import RotaryEmbedding, rope_settings_from_config
from microformers_sdk.static_steps import DecoderStepShape

from .configuration_falcon import FalconConfig

__all__ = [
    "FalconAttention",
    "FalconConfig",
    "FalconDecoderLayer",
    "FalconForCausalLM",
    "FalconForSequenceClassification",
    "FalconMLP",
    "FalconModel",
    "FalconPreTrainedModel",
]


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    return F.dropout(x, p, training=True) if training and p > 0 else x


class FalconAttention(LlamaAttention):
    """Self-attention over one fused ``query_key_value`` projection and an output projection ``dense``."""

    def __init__(self, config: FalconConfig, layer_idx: int) -> None:
        nn.Module.__init__(self)  # not LlamaAttention.__init__: Falcon fuses the projections
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = 0.0  # the reference applies none inside rotary attention
        self.sliding_window = None
        self.new_decoder_architecture = bool(config.new_decoder_architecture)
        qkv_size = (self.num_heads + 2 * self.num_key_value_heads) * self.head_dim
        self.query_key_value = nn.Linear(config.hidden_size, qkv_size, bias=config.bias)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.bias)

    @property
    def o_proj(self) -> nn.Linear:
        """Llama's name for the output projection (its forward calls it)."""
        return self.dense

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query heads ``(batch, heads, seq, head_dim)`` and key/value heads ``(batch, kv_heads, seq, head_dim)``."""
        batch, q_len, _ = hidden_states.shape
        fused = apply_linear(self.query_key_value, hidden_states)
        if self.new_decoder_architecture or self.num_key_value_heads == 1:
            # per key/value group: its query heads, then the key head, then the value head
            group = self.num_heads // self.num_key_value_heads
            qkv = fused.view(batch, q_len, self.num_key_value_heads, group + 2, self.head_dim)
            query = qkv[:, :, :, :group].reshape(batch, q_len, self.num_heads, self.head_dim)
            key, value = qkv[:, :, :, group], qkv[:, :, :, group + 1]
        else:  # the original layout: query, key, value of each head in turn
            qkv = fused.view(batch, q_len, self.num_heads, 3, self.head_dim)
            query, key, value = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]
        return query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)


class FalconMLP(nn.Module):
    """``dense_4h_to_h(act(dense_h_to_4h(x)))``."""

    def __init__(self, config: FalconConfig) -> None:
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=config.bias)
        self.act = get_activation(config.activation, "activation")
        self.dense_4h_to_h = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_linear(self.dense_4h_to_h, self.act(apply_linear(self.dense_h_to_4h, x)))


class FalconDecoderLayer(nn.Module):
    """Parallel ``x + dropout(attn(ln_attn(x)) + mlp(ln_mlp(x)))`` (one shared norm unless the new architecture
    has two), or sequential ``h = x + dropout(attn(ln(x)))``, ``h + dropout(mlp(ln2(h)))``."""

    def __init__(self, config: FalconConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attention = FalconAttention(config, layer_idx)
        self.mlp = FalconMLP(config)
        self.parallel_attn = bool(config.parallel_attn)
        self.two_norms = self.parallel_attn and config.layer_norms == 2
        eps = config.layer_norm_epsilon
        if self.two_norms:
            self.ln_attn = nn.LayerNorm(config.hidden_size, eps=eps)
            self.ln_mlp = nn.LayerNorm(config.hidden_size, eps=eps)
        else:
            self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=eps)
            if not self.parallel_attn:
                self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=eps)
        self.hidden_dropout = float(config.hidden_dropout or 0.0)
        self.attention_dropout = float(config.attention_dropout or 0.0)

    @property
    def self_attn(self) -> FalconAttention:
        """Llama's name for the attention module (its decoder reads the window from it)."""
        return self.self_attention

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
        attn_in = self.ln_attn(hidden_states) if self.two_norms else self.input_layernorm(hidden_states)
        attended, weights = self.self_attention(
            attn_in, rotary, attention_mask, is_causal, past_key_values, attention_fn, output_attentions, cache_position
        )
        if self.parallel_attn:
            mlp_out = self.mlp(self.ln_mlp(hidden_states) if self.two_norms else attn_in)
            return hidden_states + _dropout(mlp_out + attended, self.hidden_dropout, self.training), weights
        hidden_states = hidden_states + _dropout(attended, self.attention_dropout, self.training)
        mlp_out = self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states + _dropout(mlp_out, self.hidden_dropout, self.training), weights


class FalconPreTrainedModel(LlamaPreTrainedModel):
    config_class = FalconConfig
    base_model_prefix = "transformer"
    _no_split_modules: ClassVar[list[str]] = ["FalconDecoderLayer"]

    def _checkpoint_key_map(self, checkpoint_keys: set[str]) -> dict[str, str]:
        """The kernel's name map, plus ``ln_mlp`` read from ``input_layernorm`` where a checkpoint names the
        MLP norm of a two-norm layer that way (GGUF files: llama.cpp's ``attn_norm`` is that norm in every
        layout, and the GGUF mapping cannot know the layout when it names it)."""
        mapping = super()._checkpoint_key_map(checkpoint_keys)
        for name in self.state_dict(keep_vars=True):
            if name not in mapping and ".ln_mlp." in name:
                alias = name.replace(".ln_mlp.", ".input_layernorm.")
                for key in (alias, alias.removeprefix(f"{self.base_model_prefix}.")):
                    if key in checkpoint_keys:
                        mapping[name] = key
        return mapping


class FalconModel(LlamaModel, FalconPreTrainedModel):
    """The decoder stack without a head (Llama's forward over Falcon layers); returns ``BaseModelOutputWithPast``."""

    layer_class: ClassVar[type[nn.Module]] = FalconDecoderLayer

    def __init__(self, config: FalconConfig) -> None:
        FalconPreTrainedModel.__init__(self, config)  # not LlamaModel.__init__: Falcon's names and norms
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.h = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.rotary_emb = RotaryEmbedding(rope_settings_from_config(config, head_dim=config.head_dim))
        self.post_init()

    # Llama's names for Falcon's modules (its prepare/decode read them)
    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.word_embeddings

    @property
    def layers(self) -> nn.ModuleList:
        return self.h

    @property
    def norm(self) -> nn.LayerNorm:
        return self.ln_f

    def get_input_embeddings(self) -> nn.Module:
        return self.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.word_embeddings = value


class FalconForCausalLM(LlamaForCausalLM, FalconPreTrainedModel):
    """Decoder (``transformer``) plus a language-modelling head (``lm_head``, tied to the embeddings by default)."""

    base_model_class: ClassVar[type[nn.Module]] = FalconModel
    decoder_attribute: ClassVar[str] = "transformer"
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "transformer.word_embeddings.weight"}

    @property
    def model(self) -> FalconModel:
        """Llama's name for the decoder (its forward calls it)."""
        return self.transformer

    def decode_step_layout(self) -> DecodeStepLayout:
        """The decoder as a static step runs it (every layer through its own forward: no native step)."""
        config, layers = self.config, self.transformer.h
        shape = DecoderStepShape(
            config.num_attention_heads, config.key_value_heads, config.head_dim, config.head_dim**-0.5
        )
        return DecodeStepLayout(layers, self.transformer.ln_f, self.lm_head, shape, [None] * len(layers))


class FalconForSequenceClassification(LlamaForSequenceClassification, FalconPreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[nn.Module]] = FalconModel
    decoder_attribute: ClassVar[str] = "transformer"

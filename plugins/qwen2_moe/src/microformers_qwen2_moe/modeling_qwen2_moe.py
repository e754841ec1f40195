"""Qwen2-MoE: a Qwen2-shaped decoder whose MLPs are sparse mixtures of experts plus a gated shared expert.

Parameter names equal the tensor names of Qwen2-MoE checkpoints on the Hub, which the reference also
writes when it saves: ``model.layers.{i}.mlp.gate.weight`` (router), ``mlp.experts.{e}.gate_proj`` /
``up_proj`` / ``down_proj.weight`` (each expert), ``mlp.shared_expert.gate_proj`` / ``up_proj`` /
``down_proj.weight`` and ``mlp.shared_expert_gate.weight`` (the shared expert and its sigmoid gate);
dense layers (``mlp_only_layers``, ``decoder_sparse_step``) have ``mlp.gate_proj`` / ``up_proj`` /
``down_proj``; attention ``self_attn.q_proj`` / ``k_proj`` / ``v_proj`` (with biases when ``qkv_bias``) and
``o_proj``; ``input_layernorm``, ``post_attention_layernorm``, ``model.embed_tokens``, ``model.norm``,
``lm_head``, ``score``. Checkpoints holding the reference's in-memory layout (``mlp.experts.gate_up_proj`` /
``mlp.experts.down_proj`` stacked over experts) load too: :class:`~microformers_sdk.moe.FusedExpertsSource`
slices them.

One forward pass: embed, rotary ``cos``/``sin`` from the position ids, one attention mask per distinct
window (``layer_types``), then per layer ``x + attn(norm(x))`` and ``x + mlp(norm(x))``, the final RMSNorm
and the head. A sparse layer routes every token to its ``num_experts_per_tok`` best experts (softmax,
top-k, renormalised only with ``norm_topk_prob``), runs each expert on its own tokens only
(:func:`~microformers_sdk.moe.run_experts`) and adds ``sigmoid(shared_expert_gate(x)) * shared_expert(x)``.
With ``output_router_logits`` the router logits of every sparse layer are returned and the causal-LM
head reports the load-balancing ``aux_loss``, adding ``router_aux_loss_coef`` times it to the loss when
labels are given, as the reference does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers_sdk.attention import eager_attention
from microformers_sdk.cache import Cache
from microformers_sdk.decoder_heads import DecoderForSequenceClassification, MoeDecoderForCausalLM, MoeDecoderModel
from microformers_sdk.layers import GatedMLP, RMSNorm, apply_linear
from microformers_sdk.moe import FusedExpertsSource, SparseMoeBlock, TopKRouter
from microformers_sdk.rope_settings import rope_settings_from_config
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb

from .configuration_qwen2_moe import Qwen2MoeConfig

__all__ = [
    "Qwen2MoeConfig",
    "Qwen2MoeDecoderLayer",
    "Qwen2MoeForCausalLM",
    "Qwen2MoeForSequenceClassification",
    "Qwen2MoeModel",
    "Qwen2MoePreTrainedModel",
]


class Qwen2MoeAttention(nn.Module):
    """Grouped-query self-attention with rotary positions and biased q/k/v (``qkv_bias``); windows are in the mask."""

    def __init__(self, config: Qwen2MoeConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.sliding_window = config.layer_sliding_window(layer_idx)
        self.head_dim = config.attention_head_dim
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        hidden, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        bias = bool(config.qkv_bias)
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        mask: tuple[torch.Tensor | None, bool],
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, q_len, _ = hidden_states.shape
        shape = (batch, q_len, -1, self.head_dim)
        query = apply_linear(self.q_proj, hidden_states).view(shape).transpose(1, 2)
        key = apply_linear(self.k_proj, hidden_states).view(shape).transpose(1, 2)
        value = apply_linear(self.v_proj, hidden_states).view(shape).transpose(1, 2)
        query, key = apply_rotary_pos_emb(query, key, *rotary)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        attention_mask, is_causal = mask
        dropout = self.attention_dropout if self.training else 0.0
        options = {"scaling": self.scaling, "dropout": dropout, "is_causal": is_causal}
        weights = None
        if output_attentions:
            output, weights = eager_attention(query, key, value, attention_mask, return_weights=True, **options)
        else:
            output = attention_fn(query, key, value, attention_mask, **options)
        output = output.transpose(1, 2).reshape(batch, q_len, -1)
        return apply_linear(self.o_proj, output), weights


class Qwen2MoeDecoderLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``; a sparse ``mlp`` also returns router logits."""

    def __init__(self, config: Qwen2MoeConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = Qwen2MoeAttention(config, layer_idx)
        hidden, act = config.hidden_size, config.hidden_act
        self.mlp: nn.Module
        if config.is_sparse_layer(layer_idx):
            experts = [GatedMLP(hidden, config.moe_intermediate_size, act) for _ in range(config.num_experts)]
            shared = GatedMLP(hidden, config.shared_expert_intermediate_size, act)
            self.mlp = SparseMoeBlock(
                hidden, experts, config.num_experts_per_tok, normalize=bool(config.norm_topk_prob), shared_expert=shared
            )
        else:
            self.mlp = GatedMLP(hidden, config.intermediate_size, act)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        mask: tuple[torch.Tensor | None, bool],
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        attended, weights = self.self_attn(
            self.input_layernorm(hidden_states), rotary, mask, past_key_values, attention_fn, output_attentions
        )
        hidden_states = hidden_states + attended
        normed = self.post_attention_layernorm(hidden_states)
        if isinstance(self.mlp, SparseMoeBlock):
            mixed, router_logits = self.mlp(normed)
            return hidden_states + mixed, weights, router_logits
        return hidden_states + self.mlp(normed), weights, None


class Qwen2MoePreTrainedModel(PreTrainedModel):
    config_class = Qwen2MoeConfig
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["Qwen2MoeDecoderLayer"]
    supports_gradient_checkpointing = True
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"rotary_emb\.inv_freq"]

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, TopKRouter):
            nn.init.normal_(module.weight, mean=0.0, std=getattr(self.config, "initializer_range", 0.02))

    def _materialise(self, source: Mapping[str, torch.Tensor], *args: Any, **kwargs: Any) -> Any:
        # Stacked experts (``mlp.experts.gate_up_proj``, the reference's in-memory layout) read as per-expert ones.
        source = FusedExpertsSource.wrap(source, "gate_proj", "up_proj", "down_proj", self.config.num_experts)
        return super()._materialise(source, *args, **kwargs)


class Qwen2MoeModel(MoeDecoderModel, Qwen2MoePreTrainedModel):
    """The decoder stack without a head; ``forward`` (the SDK's MoE layer loop) returns ``MoeModelOutputWithPast``."""

    def __init__(self, config: Qwen2MoeConfig) -> None:
        super().__init__(config)
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)
        self.layers = nn.ModuleList(Qwen2MoeDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(rope_settings_from_config(config, head_dim=config.attention_head_dim))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value


class Qwen2MoeForCausalLM(MoeDecoderForCausalLM, Qwen2MoePreTrainedModel):
    """Decoder plus a language-modelling head; reports the load-balancing loss with ``output_router_logits``."""

    base_model_class: ClassVar[type[nn.Module]] = Qwen2MoeModel
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "model.embed_tokens.weight"}


class Qwen2MoeForSequenceClassification(DecoderForSequenceClassification, Qwen2MoePreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[nn.Module]] = Qwen2MoeModel
    decoder_call_kwargs: ClassVar[dict[str, Any]] = {"output_router_logits": False}

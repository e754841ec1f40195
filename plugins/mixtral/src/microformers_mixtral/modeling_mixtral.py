"""Mixtral: a Mistral-shaped decoder whose MLP is a sparse mixture of SwiGLU experts.

Parameter names equal the tensor names of Mixtral checkpoints on the Hub, which the reference also
writes when it saves (``model.layers.{i}.block_sparse_moe.gate.weight`` for the router,
``model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight`` / ``w3`` / ``w2`` for each expert's gate, up
and down projections, ``self_attn.q_proj`` ..., ``input_layernorm``, ``post_attention_layernorm``,
``model.embed_tokens``, ``model.norm``, ``lm_head``, ``score``). Checkpoints holding the reference's
in-memory layout (``mlp.experts.gate_up_proj`` / ``mlp.experts.down_proj`` stacked over experts, router at
``mlp.gate.weight``) load too: :class:`~microformers_sdk.moe.FusedExpertsSource` slices them.

One forward pass: embed, rotary ``cos``/``sin`` from the position ids, one attention mask (causal, padding,
``sliding_window``), then per layer ``x + attn(norm(x))`` and ``x + moe(norm(x))``, the final RMSNorm and
the head. Each MoE layer routes every token to its ``num_experts_per_tok`` best experts (softmax, top-k,
renormalised) and runs each expert on its own tokens only (:func:`~microformers_sdk.moe.run_experts`).
With ``output_router_logits`` the router logits of every layer are returned and the causal-LM head
reports the load-balancing ``aux_loss``, adding ``router_aux_loss_coef`` times it to the loss when
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
from microformers_sdk.layers import RMSNorm, apply_linear, get_activation
from microformers_sdk.moe import FusedExpertsSource, SparseMoeBlock, TopKRouter
from microformers_sdk.rope_settings import rope_settings_from_config
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb

from .configuration_mixtral import MixtralConfig

__all__ = [
    "MixtralAttention",
    "MixtralConfig",
    "MixtralDecoderLayer",
    "MixtralExpert",
    "MixtralForCausalLM",
    "MixtralForSequenceClassification",
    "MixtralModel",
    "MixtralPreTrainedModel",
]


class MixtralAttention(nn.Module):
    """Grouped-query self-attention with rotary positions; the window (if any) is in the mask."""

    def __init__(self, config: MixtralConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.attention_head_dim
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.sliding_window = config.layer_sliding_window(layer_idx)  # read by the mask builder
        hidden, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        qkv_bias = config.layer_attention_bias()
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=qkv_bias)
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


class MixtralExpert(nn.Module):
    """One expert: ``w2(act(w1(x)) * w3(x))`` (w1 gate, w3 up, w2 down), Mixtral's checkpoint names."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w2 = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.w3 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.act_fn = get_activation(act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gate, up = apply_linear(self.w1, hidden_states), apply_linear(self.w3, hidden_states)
        return apply_linear(self.w2, self.act_fn(gate) * up)


class MixtralDecoderLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + moe(norm(x))``; also returns the router logits."""

    attention_class: ClassVar[type[MixtralAttention]] = MixtralAttention

    def __init__(self, config: MixtralConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = self.attention_class(config, layer_idx)
        experts = [
            MixtralExpert(config.hidden_size, config.intermediate_size, config.hidden_act)
            for _ in range(config.num_local_experts)
        ]
        self.block_sparse_moe = SparseMoeBlock(
            config.hidden_size,
            experts,
            config.num_experts_per_tok,
            normalize=True,
            float32_weights=True,
            jitter_noise=config.router_jitter_noise,
        )
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
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        attended, weights = self.self_attn(
            self.input_layernorm(hidden_states), rotary, mask, past_key_values, attention_fn, output_attentions
        )
        hidden_states = hidden_states + attended
        mixed, router_logits = self.feed_forward(self.post_attention_layernorm(hidden_states))
        return hidden_states + mixed, weights, router_logits

    def feed_forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The MLP's output and its router logits (None for a dense MLP)."""
        return self.block_sparse_moe(hidden_states)


class MixtralPreTrainedModel(PreTrainedModel):
    config_class = MixtralConfig
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["MixtralDecoderLayer"]
    supports_gradient_checkpointing = True
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"rotary_emb\.inv_freq"]
    # Stacked experts (``mlp.experts.gate_up_proj``, the reference's in-memory layout) read as per-expert tensors
    # named (gate, up, down) here, after these renames of the checkpoint's module path.
    expert_projection_names: ClassVar[tuple[str, str, str]] = ("w1", "w3", "w2")
    expert_path_renames: ClassVar[tuple[tuple[str, str], ...]] = ((".mlp.", ".block_sparse_moe."),)

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, TopKRouter):
            nn.init.normal_(module.weight, mean=0.0, std=getattr(self.config, "initializer_range", 0.02))

    def _materialise(self, source: Mapping[str, torch.Tensor], *args: Any, **kwargs: Any) -> Any:
        source = FusedExpertsSource.wrap(
            source, *self.expert_projection_names, self.config.num_experts, renames=self.expert_path_renames
        )
        return super()._materialise(source, *args, **kwargs)


class MixtralModel(MoeDecoderModel, MixtralPreTrainedModel):
    """The decoder stack without a head; ``forward`` (the SDK's MoE layer loop) returns ``MoeModelOutputWithPast``."""

    layer_class: ClassVar[type[MixtralDecoderLayer]] = MixtralDecoderLayer

    def __init__(self, config: MixtralConfig) -> None:
        super().__init__(config)
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(rope_settings_from_config(config, head_dim=config.attention_head_dim))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value


class MixtralForCausalLM(MoeDecoderForCausalLM, MixtralPreTrainedModel):
    """Decoder plus a language-modelling head; reports the load-balancing loss with ``output_router_logits``."""

    base_model_class: ClassVar[type[nn.Module]] = MixtralModel
    num_experts_attribute: ClassVar[str] = "num_local_experts"
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "model.embed_tokens.weight"}


class MixtralForSequenceClassification(DecoderForSequenceClassification, MixtralPreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[nn.Module]] = MixtralModel
    decoder_call_kwargs: ClassVar[dict[str, Any]] = {"output_router_logits": False}

"""Qwen2-MoE: the Mixtral decoder of ``microformers-mixtral`` with biased q/k/v, a gated shared expert and dense layers.

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

The classes below derive from Mixtral's and override what differs: the attention is Mixtral's (its
config supplies the q/k/v bias and the per-layer windows), the layer names its MLP ``mlp`` and makes it
dense or sparse per layer (``Qwen2MoeDecoderLayer.feed_forward``), and stacked experts are read under
the Hub's ``gate_proj`` / ``up_proj`` / ``down_proj`` names.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers_mixtral import (
    MixtralAttention,
    MixtralDecoderLayer,
    MixtralForCausalLM,
    MixtralForSequenceClassification,
    MixtralModel,
    MixtralPreTrainedModel,
)
from microformers_sdk.layers import GatedMLP, RMSNorm
from microformers_sdk.moe import SparseMoeBlock

from .configuration_qwen2_moe import Qwen2MoeConfig

__all__ = [
    "Qwen2MoeConfig",
    "Qwen2MoeDecoderLayer",
    "Qwen2MoeForCausalLM",
    "Qwen2MoeForSequenceClassification",
    "Qwen2MoeModel",
    "Qwen2MoePreTrainedModel",
]


class Qwen2MoeAttention(MixtralAttention):
    """Mixtral's grouped-query self-attention; ``qkv_bias`` and the per-layer windows come from the config."""


class Qwen2MoeDecoderLayer(MixtralDecoderLayer):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``; a sparse ``mlp`` also returns router logits."""

    attention_class: ClassVar[type[MixtralAttention]] = Qwen2MoeAttention

    def __init__(self, config: Qwen2MoeConfig, layer_idx: int) -> None:
        nn.Module.__init__(self)  # not MixtralDecoderLayer.__init__: the MLP is named ``mlp`` and may be dense
        self.self_attn = self.attention_class(config, layer_idx)
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

    def feed_forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if isinstance(self.mlp, SparseMoeBlock):
            return self.mlp(hidden_states)
        return self.mlp(hidden_states), None  # a dense layer routes nothing


class Qwen2MoePreTrainedModel(MixtralPreTrainedModel):
    config_class = Qwen2MoeConfig
    _no_split_modules: ClassVar[list[str]] = ["Qwen2MoeDecoderLayer"]
    # Stacked experts read as per-expert tensors under the Hub's names, at the same module path.
    expert_projection_names: ClassVar[tuple[str, str, str]] = ("gate_proj", "up_proj", "down_proj")
    expert_path_renames: ClassVar[tuple[tuple[str, str], ...]] = ()


class Qwen2MoeModel(MixtralModel, Qwen2MoePreTrainedModel):
    """The decoder stack without a head; ``forward`` (the SDK's MoE layer loop) returns ``MoeModelOutputWithPast``."""

    layer_class: ClassVar[type[MixtralDecoderLayer]] = Qwen2MoeDecoderLayer


class Qwen2MoeForCausalLM(MixtralForCausalLM, Qwen2MoePreTrainedModel):
    """Decoder plus a language-modelling head; reports the load-balancing loss with ``output_router_logits``."""

    base_model_class: ClassVar[type[nn.Module]] = Qwen2MoeModel
    num_experts_attribute: ClassVar[str] = "num_experts"


class Qwen2MoeForSequenceClassification(MixtralForSequenceClassification, Qwen2MoePreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[nn.Module]] = Qwen2MoeModel
    decoder_call_kwargs: ClassVar[dict[str, Any]] = {"output_router_logits": False}

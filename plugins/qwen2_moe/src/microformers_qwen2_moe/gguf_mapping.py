"""How llama.cpp GGUF files of Qwen2-MoE map onto this plugin's model (read by microformers-gguf).

Attention is Qwen2's (biases on q/k/v, no Q/K interleave). llama.cpp stacks each layer's experts into
one 3-D tensor per projection (``ffn_gate_exps``/``ffn_up_exps``/``ffn_down_exps``, experts first);
:class:`Experts` splits them back into ``mlp.experts.{e}.*``. The router is ``ffn_gate_inp``, the shared
expert ``ffn_*_shexp`` and its sigmoid gate ``ffn_gate_inp_shexp`` (stored as a vector where the model
has a ``(1, hidden)`` matrix). Layers listed in ``mlp_only_layers`` keep the dense ``ffn_gate/up/down``.
"""

from __future__ import annotations

from typing import Any

from microformers_sdk.gguf import (
    DECODER_CHECKS,
    DECODER_CONFIG,
    OPTIONAL,
    ROTARY_TABLES,
    Check,
    Experts,
    GGUFArchitecture,
    Meta,
    Reshape,
    Target,
    decoder_tensors,
)

_MLP = "model.layers.{bid}.mlp"

_CONFIG: dict[str, Any] = {
    **DECODER_CONFIG,
    "intermediate_size": Meta("feed_forward_length", default=OPTIONAL),
    "num_experts": Meta("expert_count"),
    "num_experts_per_tok": Meta("expert_used_count"),
    "moe_intermediate_size": Meta("expert_feed_forward_length"),
    "shared_expert_intermediate_size": Meta("expert_shared_feed_forward_length"),
}

QWEN2MOE = GGUFArchitecture(
    gguf_name="qwen2moe",
    model_type="qwen2_moe",
    architectures=("Qwen2MoeForCausalLM",),
    config=_CONFIG,
    tensors={
        **decoder_tensors(),
        "blk.{bid}.ffn_gate_inp.weight": f"{_MLP}.gate.weight",
        "blk.{bid}.ffn_gate_exps.weight": Experts(f"{_MLP}.experts.{{expert}}.gate_proj.weight"),
        "blk.{bid}.ffn_up_exps.weight": Experts(f"{_MLP}.experts.{{expert}}.up_proj.weight"),
        "blk.{bid}.ffn_down_exps.weight": Experts(f"{_MLP}.experts.{{expert}}.down_proj.weight"),
        "blk.{bid}.ffn_gate_shexp.weight": f"{_MLP}.shared_expert.gate_proj.weight",
        "blk.{bid}.ffn_up_shexp.weight": f"{_MLP}.shared_expert.up_proj.weight",
        "blk.{bid}.ffn_down_shexp.weight": f"{_MLP}.shared_expert.down_proj.weight",
        "blk.{bid}.ffn_gate_inp_shexp.weight": Target(f"{_MLP}.shared_expert_gate.weight", (Reshape((1, -1)),)),
    },
    flags={"qkv_bias": "blk.0.attn_q.bias"},
    derived=ROTARY_TABLES,
    checks=(
        *DECODER_CHECKS,
        Check("blk.0.ffn_gate_inp.weight", 0, ("num_experts",)),
        Check("blk.0.ffn_gate_exps.weight", 0, ("num_experts",)),
        Check("blk.0.ffn_up_exps.weight", 1, ("moe_intermediate_size",)),
        Check("blk.0.ffn_up_shexp.weight", 0, ("shared_expert_intermediate_size",)),
    ),
)

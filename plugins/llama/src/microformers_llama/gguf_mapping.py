"""How llama.cpp GGUF files of the Llama family map onto this plugin's models (read by microformers-gguf).

All four share the llama tensor layout (``blk.N.attn_q`` ... ``blk.N.ffn_down``). Differences:

- ``llama``/``mistral``: llama.cpp interleaves the two rotary halves of every Q and K head
  (:class:`Rotary` undoes it) and writes ``rope.dimension_count`` = head size.
- ``qwen2``: no interleave; ``rope.dimension_count`` is not the head size. Attention biases.
- ``qwen3``: no interleave; per-head ``attn_q_norm``/``attn_k_norm``; ``attention.key_length`` is the head size.

llama.cpp also writes Mixtral as ``llama``: such a file states ``llama.expert_count`` and stores each
layer's experts stacked (``ffn_gate_exps``/``ffn_up_exps``/``ffn_down_exps``; older files one tensor per
expert, ``ffn_gate.{e}``) with the router
``ffn_gate_inp``; it becomes a ``mixtral`` config (served by microformers-mixtral, whose tensor names
are used here as data) with the experts split back into ``block_sparse_moe.experts.{e}.w1/w3/w2``.
"""

from __future__ import annotations

from typing import Any

from microformers.errors import ConfigError
from microformers_sdk.gguf import (
    DECODER_CHECKS,
    DECODER_CONFIG,
    OPTIONAL,
    ROTARY_TABLES,
    Experts,
    GGUFArchitecture,
    GGUFView,
    Meta,
    Quotient,
    Rotary,
    decoder_tensors,
)

_LLAMA_TENSORS = decoder_tensors(q=(Rotary("num_attention_heads"),), k=(Rotary("num_key_value_heads"),))
_LLAMA_CONFIG: dict[str, Any] = {
    **DECODER_CONFIG,
    "head_dim": Meta(("attention.key_length", "rope.dimension_count"), default=OPTIONAL),
}
_FLAGS = {"attention_bias": "blk.0.attn_q.bias"}
_MOE = "model.layers.{bid}.block_sparse_moe"


def _llama_like(name: str, class_prefix: str, **extra: Any) -> GGUFArchitecture:
    return GGUFArchitecture(
        gguf_name=name,
        model_type=name,
        architectures=(f"{class_prefix}ForCausalLM",),
        config={**_LLAMA_CONFIG, **extra.pop("config", {})},
        tensors={**_LLAMA_TENSORS, **extra.pop("tensors", {})},
        flags=_FLAGS,
        derived=ROTARY_TABLES,
        checks=DECODER_CHECKS,
        **extra,
    )


def mixtral_when_experts(config: dict[str, Any], gguf: GGUFView) -> None:
    """A ``llama`` file with experts is a Mixtral."""
    if not config.get("num_local_experts"):
        config.pop("num_local_experts", None)
        config.pop("num_experts_per_tok", None)
        return
    config["model_type"] = "mixtral"
    config["architectures"] = ["MixtralForCausalLM"]
    if config.pop("attention_bias"):
        raise ConfigError(
            f"GGUF file {gguf.path} has experts (a Mixtral) and attention biases, which Mixtral has not; "
            "microformers-mixtral cannot load it."
        )


LLAMA = _llama_like(
    "llama",
    "Llama",
    config={
        "num_local_experts": Meta("expert_count", default=OPTIONAL),
        "num_experts_per_tok": Meta("expert_used_count", default=OPTIONAL),
    },
    tensors={
        "blk.{bid}.ffn_gate_inp.weight": f"{_MOE}.gate.weight",
        "blk.{bid}.ffn_gate_exps.weight": Experts(f"{_MOE}.experts.{{expert}}.w1.weight"),
        "blk.{bid}.ffn_down_exps.weight": Experts(f"{_MOE}.experts.{{expert}}.w2.weight"),
        "blk.{bid}.ffn_up_exps.weight": Experts(f"{_MOE}.experts.{{expert}}.w3.weight"),
        # older files: one tensor per expert
        "blk.{bid}.ffn_gate.{expert}.weight": f"{_MOE}.experts.{{expert}}.w1.weight",
        "blk.{bid}.ffn_down.{expert}.weight": f"{_MOE}.experts.{{expert}}.w2.weight",
        "blk.{bid}.ffn_up.{expert}.weight": f"{_MOE}.experts.{{expert}}.w3.weight",
    },
    adjust_config=mixtral_when_experts,
)
MISTRAL = _llama_like("mistral", "Mistral")

QWEN2 = GGUFArchitecture(
    gguf_name="qwen2",
    model_type="qwen2",
    architectures=("Qwen2ForCausalLM",),
    config={**DECODER_CONFIG, "head_dim": Meta("attention.key_length", default=OPTIONAL)},
    tensors=decoder_tensors(),
    flags=_FLAGS,
    derived=ROTARY_TABLES,
    checks=DECODER_CHECKS,
)

QWEN3 = GGUFArchitecture(
    gguf_name="qwen3",
    model_type="qwen3",
    architectures=("Qwen3ForCausalLM",),
    # llama.cpp's head size without the key is hidden / heads (the config class default, 128, is one checkpoint's)
    config={
        **DECODER_CONFIG,
        "head_dim": Meta("attention.key_length", default=Quotient("hidden_size", "num_attention_heads")),
    },
    tensors={
        **decoder_tensors(),
        "blk.{bid}.attn_q_norm.weight": "model.layers.{bid}.self_attn.q_norm.weight",
        "blk.{bid}.attn_k_norm.weight": "model.layers.{bid}.self_attn.k_norm.weight",
    },
    flags=_FLAGS,
    derived=ROTARY_TABLES,
    checks=DECODER_CHECKS,
)

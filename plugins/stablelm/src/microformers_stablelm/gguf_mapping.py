"""How llama.cpp GGUF files of StableLM map onto this plugin's model (read by microformers-gguf).

llama.cpp keeps StableLM's layout: separate ``attn_q``/``attn_k``/``attn_v`` (rows not interleaved: it
rotates them NeoX-style, as the Hugging Face model does), LayerNorms with biases, the SwiGLU MLP as
``ffn_gate``/``ffn_up``/``ffn_down``. What the config does not state is read from the tensors: q/k/v
biases (``use_qkv_bias``), a second norm per layer (``ffn_norm``; absent with ``use_parallel_residual``)
and per-head q/k norms (``attn_q_norm``/``attn_k_norm``, each layer's heads stacked into one
``(heads, head_dim)`` tensor, split back into ``q_layernorm.norms.{h}``). ``rope.dimension_count``
(the rotated channels per head) gives ``partial_rotary_factor``.
"""

from __future__ import annotations

from typing import Any

from microformers_sdk.gguf import (
    ROTARY_TABLES,
    Check,
    Experts,
    Field,
    GGUFArchitecture,
    GGUFView,
    Meta,
    linear,
)

_BLOCK = "model.layers.{bid}"


def adjust(config: dict[str, Any], gguf: GGUFView) -> None:
    config["use_parallel_residual"] = not config.pop("_has_ffn_norm")
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    rope_dims = gguf.metadata.get(gguf.key("rope.dimension_count"))
    if isinstance(rope_dims, int) and not isinstance(rope_dims, bool) and 0 < rope_dims <= head_dim:
        config["partial_rotary_factor"] = rope_dims / head_dim


STABLELM = GGUFArchitecture(
    gguf_name="stablelm",
    model_type="stablelm",
    architectures=("StableLmForCausalLM",),
    config={
        "hidden_size": Meta("embedding_length"),
        "intermediate_size": Meta("feed_forward_length"),
        "num_hidden_layers": Meta("block_count"),
        "num_attention_heads": Meta("attention.head_count"),
        "num_key_value_heads": Meta("attention.head_count_kv", default=Field("num_attention_heads")),
        "max_position_embeddings": Meta("context_length", default=4096),
        "layer_norm_eps": Meta("attention.layer_norm_epsilon", float, default=1e-5),
        "rope_theta": Meta("rope.freq_base", float, default=10000.0),
        "hidden_act": "silu",
    },
    tensors={
        "token_embd.weight": "model.embed_tokens.weight",
        **linear("output_norm", "model.norm"),
        "output.weight": "lm_head.weight",
        **linear("blk.{bid}.attn_norm", f"{_BLOCK}.input_layernorm"),
        **linear("blk.{bid}.ffn_norm", f"{_BLOCK}.post_attention_layernorm"),
        **linear("blk.{bid}.attn_q", f"{_BLOCK}.self_attn.q_proj"),
        **linear("blk.{bid}.attn_k", f"{_BLOCK}.self_attn.k_proj"),
        **linear("blk.{bid}.attn_v", f"{_BLOCK}.self_attn.v_proj"),
        **linear("blk.{bid}.attn_output", f"{_BLOCK}.self_attn.o_proj", params=("weight",)),
        "blk.{bid}.attn_q_norm.weight": Experts(f"{_BLOCK}.self_attn.q_layernorm.norms.{{expert}}.weight"),
        "blk.{bid}.attn_k_norm.weight": Experts(f"{_BLOCK}.self_attn.k_layernorm.norms.{{expert}}.weight"),
        **linear("blk.{bid}.ffn_gate", f"{_BLOCK}.mlp.gate_proj", params=("weight",)),
        **linear("blk.{bid}.ffn_up", f"{_BLOCK}.mlp.up_proj", params=("weight",)),
        **linear("blk.{bid}.ffn_down", f"{_BLOCK}.mlp.down_proj", params=("weight",)),
    },
    flags={
        "use_qkv_bias": "blk.0.attn_q.bias",
        "qk_layernorm": "blk.0.attn_q_norm.weight",
        "_has_ffn_norm": "blk.0.ffn_norm.weight",
    },
    derived=ROTARY_TABLES,
    checks=(
        Check("token_embd.weight", 1, ("hidden_size",)),
        Check("blk.0.ffn_up.weight", 0, ("intermediate_size",)),
        Check("blk.0.attn_q.weight", 0, ("hidden_size",)),
        Check("blk.0.attn_k.weight", 0, ("num_key_value_heads", "head_dim")),
    ),
    adjust_config=adjust,
)

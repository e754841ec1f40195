"""How llama.cpp GGUF files of StarCoder2 map onto this plugin's model (read by microformers-gguf).

llama.cpp keeps StarCoder2's layout: separate ``attn_q``/``attn_k``/``attn_v`` (rows not interleaved: it
rotates them NeoX-style, as the Hugging Face model does), LayerNorms with biases (``attn_norm``,
``ffn_norm``, ``output_norm``), the plain MLP as ``ffn_up`` (``c_fc``) and ``ffn_down`` (``c_proj``).
Whether the projections carry biases is read from the tensors (``use_bias``); the activation is the
tanh GELU every StarCoder2 checkpoint uses. A file without ``output.weight`` has tied embeddings.
"""

from __future__ import annotations

from typing import Any

from microformers_sdk.gguf import (
    ROTARY_TABLES,
    Check,
    Field,
    GGUFArchitecture,
    GGUFView,
    Meta,
    linear,
)

_BLOCK = "model.layers.{bid}"


def adjust(config: dict[str, Any], gguf: GGUFView) -> None:
    if not config.get("sliding_window"):  # llama.cpp writes 0 for "no window"
        config["sliding_window"] = None


STARCODER2 = GGUFArchitecture(
    gguf_name="starcoder2",
    model_type="starcoder2",
    architectures=("Starcoder2ForCausalLM",),
    config={
        "hidden_size": Meta("embedding_length"),
        "intermediate_size": Meta("feed_forward_length"),
        "num_hidden_layers": Meta("block_count"),
        "num_attention_heads": Meta("attention.head_count"),
        "num_key_value_heads": Meta("attention.head_count_kv", default=Field("num_attention_heads")),
        "max_position_embeddings": Meta("context_length", default=4096),
        "norm_epsilon": Meta("attention.layer_norm_epsilon", float, default=1e-5),
        "rope_theta": Meta("rope.freq_base", float, default=10000.0),
        "sliding_window": Meta("attention.sliding_window", default=None),
        "hidden_act": "gelu_pytorch_tanh",
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
        **linear("blk.{bid}.attn_output", f"{_BLOCK}.self_attn.o_proj"),
        **linear("blk.{bid}.ffn_up", f"{_BLOCK}.mlp.c_fc"),
        **linear("blk.{bid}.ffn_down", f"{_BLOCK}.mlp.c_proj"),
    },
    flags={"use_bias": "blk.0.attn_q.bias"},
    derived=ROTARY_TABLES,
    checks=(
        Check("token_embd.weight", 1, ("hidden_size",)),
        Check("blk.0.ffn_up.weight", 0, ("intermediate_size",)),
        Check("blk.0.attn_q.weight", 0, ("hidden_size",)),
        Check("blk.0.attn_k.weight", 0, ("num_key_value_heads", "head_dim")),
    ),
    adjust_config=adjust,
)

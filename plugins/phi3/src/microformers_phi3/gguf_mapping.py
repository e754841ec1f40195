"""How llama.cpp GGUF files of Phi-3 map onto this plugin's model (read by microformers-gguf).

llama.cpp keeps Phi-3's fused projections: ``attn_qkv`` is ``qkv_proj`` and ``ffn_up`` is the fused
``gate_up_proj`` (gate rows first); files that store ``attn_q``/``attn_k``/``attn_v`` separately are
concatenated back into ``qkv_proj``. Q/K rows are not interleaved.

LongRoPE lives in tensors, not metadata: ``rope_factors_long``/``rope_factors_short`` hold the
per-frequency factors (present only for the long-context models) and become ``rope_scaling``
``{"type": "longrope", ...}`` with ``rope.scaling.original_context_length`` as
``original_max_position_embeddings``. ``rope.dimension_count`` smaller than the head size is a partial
rotary factor; a ``attention.sliding_window`` of 0 means none.
"""

from __future__ import annotations

from typing import Any

from microformers_sdk.gguf import (
    DECODER_CONFIG,
    ROTARY_TABLES,
    Check,
    Field,
    GGUFArchitecture,
    GGUFView,
    Meta,
    Part,
    linear,
)

_BLOCK = "model.layers.{bid}"
_QKV = f"{_BLOCK}.self_attn.qkv_proj.weight"


def adjust(config: dict[str, Any], gguf: GGUFView) -> None:
    if not config.get("sliding_window"):
        config["sliding_window"] = None
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    rope_dims = gguf.metadata.get(gguf.key("rope.dimension_count"))
    if isinstance(rope_dims, int) and 0 < rope_dims < head_dim:
        config["partial_rotary_factor"] = rope_dims / head_dim
    if "rope_factors_long.weight" in gguf.shapes:
        config["rope_scaling"] = {
            "type": "longrope",
            "long_factor": [float(x) for x in gguf.read("rope_factors_long.weight").reshape(-1)],
            "short_factor": [float(x) for x in gguf.read("rope_factors_short.weight").reshape(-1)],
        }


PHI3 = GGUFArchitecture(
    gguf_name="phi3",
    model_type="phi3",
    architectures=("Phi3ForCausalLM",),
    config={
        **DECODER_CONFIG,
        "rms_norm_eps": Meta("attention.layer_norm_rms_epsilon", float, default=1e-5),
        "original_max_position_embeddings": Meta(
            "rope.scaling.original_context_length", default=Field("max_position_embeddings")
        ),
        "sliding_window": Meta("attention.sliding_window", default=None),
    },
    tensors={
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
        "blk.{bid}.attn_norm.weight": f"{_BLOCK}.input_layernorm.weight",
        "blk.{bid}.ffn_norm.weight": f"{_BLOCK}.post_attention_layernorm.weight",
        "blk.{bid}.attn_qkv.weight": _QKV,
        "blk.{bid}.attn_q.weight": Part(_QKV, 0, 3),
        "blk.{bid}.attn_k.weight": Part(_QKV, 1, 3),
        "blk.{bid}.attn_v.weight": Part(_QKV, 2, 3),
        **linear("blk.{bid}.attn_output", f"{_BLOCK}.self_attn.o_proj", params=("weight",)),
        **linear("blk.{bid}.ffn_up", f"{_BLOCK}.mlp.gate_up_proj", params=("weight",)),
        **linear("blk.{bid}.ffn_down", f"{_BLOCK}.mlp.down_proj", params=("weight",)),
    },
    rope=False,
    derived=(*ROTARY_TABLES, r"rope_factors_(long|short)\.weight"),
    checks=(
        Check("token_embd.weight", 1, ("hidden_size",)),
        Check("blk.0.ffn_up.weight", 0, (2, "intermediate_size")),
        Check("blk.0.ffn_down.weight", 1, ("intermediate_size",)),
        Check("blk.0.attn_output.weight", 1, ("num_attention_heads", "head_dim")),
    ),
    tokenizer="normalizer",
    adjust_config=adjust,
)

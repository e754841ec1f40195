"""How llama.cpp GGUF files of BLOOM map onto this plugin's model (read by microformers-gguf).

llama.cpp's converter reorders the fused ``attn_qkv`` rows from BLOOM's per-head query/key/value to all
query rows, then all key rows, then all value rows (weights and biases); :class:`PerHeadQKV` undoes
that. The embedding LayerNorm is ``token_embd_norm``; every norm and projection carries a bias. A file
without ``output.weight`` has tied embeddings (BLOOM's default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from microformers_sdk.gguf import Check, GGUFArchitecture, Meta, Target, linear

_BLOCK = "transformer.h.{bid}"


@attrs.frozen
class PerHeadQKV:
    """``[all q; all k; all v]`` rows (llama.cpp) -> ``[q_h; k_h; v_h]`` per head (Hugging Face)."""

    def apply(self, tensor: Any, config: Mapping[str, Any]) -> Any:
        import torch

        heads = int(config["n_head"])
        parts = (part.reshape(heads, -1, *tensor.shape[1:]) for part in tensor.chunk(3, dim=0))
        return torch.stack(tuple(parts), dim=1).reshape(tensor.shape)

    def shape(self, shape: tuple[int, ...], config: Mapping[str, Any]) -> tuple[int, ...]:
        return shape


BLOOM = GGUFArchitecture(
    gguf_name="bloom",
    model_type="bloom",
    architectures=("BloomForCausalLM",),
    config={
        "hidden_size": Meta("embedding_length"),
        "n_layer": Meta("block_count"),
        "n_head": Meta("attention.head_count"),
        "layer_norm_epsilon": Meta("attention.layer_norm_epsilon", float, default=1e-5),
    },
    tensors={
        "token_embd.weight": "transformer.word_embeddings.weight",
        **linear("token_embd_norm", "transformer.word_embeddings_layernorm"),
        **linear("output_norm", "transformer.ln_f"),
        "output.weight": "lm_head.weight",
        **linear("blk.{bid}.attn_norm", f"{_BLOCK}.input_layernorm"),
        "blk.{bid}.attn_qkv.weight": Target(f"{_BLOCK}.self_attention.query_key_value.weight", (PerHeadQKV(),)),
        "blk.{bid}.attn_qkv.bias": Target(f"{_BLOCK}.self_attention.query_key_value.bias", (PerHeadQKV(),)),
        **linear("blk.{bid}.attn_output", f"{_BLOCK}.self_attention.dense"),
        **linear("blk.{bid}.ffn_norm", f"{_BLOCK}.post_attention_layernorm"),
        **linear("blk.{bid}.ffn_up", f"{_BLOCK}.mlp.dense_h_to_4h"),
        **linear("blk.{bid}.ffn_down", f"{_BLOCK}.mlp.dense_4h_to_h"),
    },
    rope=False,
    checks=(
        Check("token_embd.weight", 1, ("hidden_size",)),
        Check("blk.0.attn_qkv.weight", 0, (3, "hidden_size")),
        Check("blk.0.ffn_up.weight", 0, (4, "hidden_size")),
    ),
)

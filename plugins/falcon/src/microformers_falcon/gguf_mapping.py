"""How llama.cpp GGUF files of Falcon map onto this plugin's model (read by microformers-gguf).

llama.cpp stores the fused ``attn_qkv`` with every query row first, then the key rows, then the value rows;
the Hugging Face checkpoint groups them per key/value head (its query heads, then one key and one value
head). :class:`GroupedQKV` undoes that (for multi-query files, one group, the two layouts coincide).
Norm names follow the converter: ``attn_norm`` is ``input_layernorm`` (or, in the new decoder architecture
with two norms, ``ln_mlp``) and ``attn_norm_2`` is ``ln_attn``. The layout is read from the file: more than
one key/value head (``attention.head_count_kv``) or an ``attn_norm_2`` tensor is the new decoder
architecture (two norms when ``attn_norm_2`` is present), else multi-query; llama.cpp runs only the
parallel-attention Falcons, with rotary positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from microformers_sdk.gguf import ROTARY_TABLES, Check, GGUFArchitecture, GGUFView, Meta, Target, linear

_BLOCK = "transformer.h.{bid}"


@attrs.frozen
class GroupedQKV:
    """``[all q; all k; all v]`` rows (llama.cpp) -> per key/value group ``[its q; k; v]`` rows (Hugging Face)."""

    def apply(self, tensor: Any, config: Mapping[str, Any]) -> Any:
        import torch

        heads, kv_heads = int(config["num_attention_heads"]), int(config["num_kv_heads"])
        head_dim = int(config["hidden_size"]) // heads
        q, k, v = tensor.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=0)
        grouped = (part.reshape(kv_heads, -1, *tensor.shape[1:]) for part in (q, k, v))
        return torch.cat(tuple(grouped), dim=1).reshape(tensor.shape)

    def shape(self, shape: tuple[int, ...], config: Mapping[str, Any]) -> tuple[int, ...]:
        return shape


def adjust(config: dict[str, Any], gguf: GGUFView) -> None:
    two_norms = config.pop("_has_attn_norm_2")
    if config["num_kv_heads"] > 1 or two_norms:
        config["new_decoder_architecture"] = True
        config["multi_query"] = False
        config["num_ln_in_parallel_attn"] = 2 if two_norms else 1
    else:
        config["new_decoder_architecture"] = False
        config["multi_query"] = True


# attn_norm is ``input_layernorm``, or ``ln_mlp`` in a two-norm layer: named ``input_layernorm`` here, the model
# reads its ``ln_mlp`` from that name (``FalconPreTrainedModel._checkpoint_key_map``); attn_norm_2 is ``ln_attn``.
_NORMS = {
    **linear("blk.{bid}.attn_norm", f"{_BLOCK}.input_layernorm"),
    **linear("blk.{bid}.attn_norm_2", f"{_BLOCK}.ln_attn"),
}

FALCON = GGUFArchitecture(
    gguf_name="falcon",
    model_type="falcon",
    architectures=("FalconForCausalLM",),
    config={
        "hidden_size": Meta("embedding_length"),
        "ffn_hidden_size": Meta("feed_forward_length", default=None),
        "num_hidden_layers": Meta("block_count"),
        "num_attention_heads": Meta("attention.head_count"),
        "num_kv_heads": Meta("attention.head_count_kv", default=1),
        "max_position_embeddings": Meta("context_length", default=2048),
        "layer_norm_epsilon": Meta("attention.layer_norm_epsilon", float, default=1e-5),
        "rope_theta": Meta("rope.freq_base", float, default=10000.0),
        "parallel_attn": True,
        "alibi": False,
        "activation": "gelu",
    },
    tensors={
        "token_embd.weight": "transformer.word_embeddings.weight",
        **linear("output_norm", "transformer.ln_f"),
        "output.weight": "lm_head.weight",
        **_NORMS,
        "blk.{bid}.attn_qkv.weight": Target(f"{_BLOCK}.self_attention.query_key_value.weight", (GroupedQKV(),)),
        "blk.{bid}.attn_qkv.bias": Target(f"{_BLOCK}.self_attention.query_key_value.bias", (GroupedQKV(),)),
        **linear("blk.{bid}.attn_output", f"{_BLOCK}.self_attention.dense"),
        **linear("blk.{bid}.ffn_up", f"{_BLOCK}.mlp.dense_h_to_4h"),
        **linear("blk.{bid}.ffn_down", f"{_BLOCK}.mlp.dense_4h_to_h"),
    },
    flags={"bias": "blk.0.attn_qkv.bias", "_has_attn_norm_2": "blk.0.attn_norm_2.weight"},
    derived=ROTARY_TABLES,
    checks=(
        Check("token_embd.weight", 1, ("hidden_size",)),
        Check("blk.0.ffn_up.weight", 0, ("ffn_hidden_size",)),
        Check("blk.0.attn_output.weight", 1, ("hidden_size",)),
    ),
    adjust_config=adjust,
)

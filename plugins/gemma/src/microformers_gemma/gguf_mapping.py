"""How llama.cpp GGUF files of Gemma 2 and Gemma 3 (text) map onto this plugin's models (read by microformers-gguf).

The tensors are the llama layout plus Gemma's extra norms (``post_attention_norm``, ``post_ffw_norm``;
``ffn_norm`` is the pre-feed-forward norm) and, for Gemma 3, per-head ``attn_q_norm``/``attn_k_norm``.
llama.cpp's RMSNorm multiplies by the stored weight, so its converter stores every Gemma norm weight
as ``1 + w``; :class:`Shift` ``(-1.0)`` gives back the ``w`` of the ``(1 + w)`` norms here. Q/K rows are
not interleaved. The embedding is always tied (no ``output.weight``).

What the files do not state is what llama.cpp assumes: the query scale is ``1/sqrt(head_dim)``
except for the 27B models (46 layers for Gemma 2, 62 for Gemma 3), which use ``1/sqrt(hidden/heads)``;
Gemma 2 alternates sliding and global layers, Gemma 3 has five sliding layers per global one (all
global when the file has no sliding window), and Gemma 3's sliding layers rotate with base 10,000
while ``rope.freq_base`` (and any ``rope.scaling``) belongs to the global layers.
"""

from __future__ import annotations

from typing import Any

from microformers_sdk.gguf import (
    DECODER_CHECKS,
    DECODER_CONFIG,
    OPTIONAL,
    GGUFArchitecture,
    GGUFView,
    Meta,
    Shift,
    Target,
    decoder_tensors,
)

_ONE = (Shift(-1.0),)
_BLOCK = "model.layers.{bid}"
_TENSORS = {
    **decoder_tensors(norm=_ONE),
    # ffn_norm is Gemma's pre-feed-forward norm, not the llama post-attention one
    "blk.{bid}.ffn_norm.weight": Target(f"{_BLOCK}.pre_feedforward_layernorm.weight", _ONE),
    "blk.{bid}.post_attention_norm.weight": Target(f"{_BLOCK}.post_attention_layernorm.weight", _ONE),
    "blk.{bid}.post_ffw_norm.weight": Target(f"{_BLOCK}.post_feedforward_layernorm.weight", _ONE),
}
_CONFIG: dict[str, Any] = {
    **{k: v for k, v in DECODER_CONFIG.items() if k != "hidden_act"},
    "hidden_activation": "gelu_pytorch_tanh",
    "head_dim": Meta("attention.key_length", default=256),
    "sliding_window": Meta("attention.sliding_window", default=OPTIONAL),
}
_LARGEST = {"gemma2": 46, "gemma3": 62}  # block counts of the 27B models


def _query_scale(config: dict[str, Any], gguf: GGUFView, arch: str) -> None:
    if config["num_hidden_layers"] == _LARGEST[arch]:
        config["query_pre_attn_scalar"] = config["hidden_size"] // config["num_attention_heads"]
    else:
        config["query_pre_attn_scalar"] = config["head_dim"]


def adjust_gemma2(config: dict[str, Any], gguf: GGUFView) -> None:
    _query_scale(config, gguf, "gemma2")


def adjust_gemma3(config: dict[str, Any], gguf: GGUFView) -> None:
    _query_scale(config, gguf, "gemma3")
    config.pop("rope_theta", None)
    config.pop("rope_scaling", None)
    config["rope_parameters"] = {
        "full_attention": config["rope_parameters"],
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    }
    if "sliding_window" not in config:
        config["layer_types"] = ["full_attention"] * config["num_hidden_layers"]


GEMMA2 = GGUFArchitecture(
    gguf_name="gemma2",
    model_type="gemma2",
    architectures=("Gemma2ForCausalLM",),
    config={
        **_CONFIG,
        "attn_logit_softcapping": Meta("attn_logit_softcapping", float, default=50.0),
        "final_logit_softcapping": Meta("final_logit_softcapping", float, default=30.0),
    },
    tensors=_TENSORS,
    checks=DECODER_CHECKS,
    tokenizer="gemma",
    adjust_config=adjust_gemma2,
)

GEMMA3 = GGUFArchitecture(
    gguf_name="gemma3",
    model_type="gemma3_text",
    architectures=("Gemma3ForCausalLM",),
    config={
        **_CONFIG,
        "rope_theta": Meta("rope.freq_base", float, default=1_000_000.0),
        "final_logit_softcapping": Meta("final_logit_softcapping", float, default=None),
        "attn_logit_softcapping": None,
    },
    tensors={
        **_TENSORS,
        "blk.{bid}.attn_q_norm.weight": Target(f"{_BLOCK}.self_attn.q_norm.weight", _ONE),
        "blk.{bid}.attn_k_norm.weight": Target(f"{_BLOCK}.self_attn.k_norm.weight", _ONE),
    },
    checks=DECODER_CHECKS,
    tokenizer="gemma",
    adjust_config=adjust_gemma3,
)

"""GGUF architectures this plugin maps to Hugging Face models: config keys and tensor names."""

from __future__ import annotations

import re
from typing import Any

import attrs

from microformers.errors import ConfigError, UnknownModelTypeError

from .reader import GGUFFile

# tokenizer.json's "model_max_length" when nothing limits it (the value Hugging Face tokenizers use).
UNLIMITED_LENGTH = int(1e30)


@attrs.frozen
class Architecture:
    """How one ``general.architecture`` value maps onto a Hugging Face model type."""

    gguf_name: str
    model_type: str
    causal_lm_class: str
    # llama.cpp interleaves the rotary halves of Q/K rows for llama-style models (not for qwen2).
    permutes_qk: bool
    # llama.cpp writes rope.dimension_count = head_dim for llama; for other models it may differ.
    head_dim_from_rope: bool


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("llama", "llama", "LlamaForCausalLM", permutes_qk=True, head_dim_from_rope=True),
    "mistral": Architecture("mistral", "mistral", "MistralForCausalLM", permutes_qk=True, head_dim_from_rope=True),
    "qwen2": Architecture("qwen2", "qwen2", "Qwen2ForCausalLM", permutes_qk=False, head_dim_from_rope=False),
}

_GLOBAL_TENSORS: dict[str, str] = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

_BLOCK_TENSORS: dict[str, str] = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output.bias": "self_attn.o_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

# Tensors llama.cpp stores that a Hugging Face model rebuilds itself (rotary frequencies).
_DERIVED_TENSORS = re.compile(r"^(rope_freqs\.weight|blk\.\d+\.attn_rot_embd(\.weight)?)$")
_BLOCK_NAME = re.compile(r"^blk\.(\d+)\.(.+)$")


def architecture_of(gguf: GGUFFile) -> Architecture:
    """The mapping for this file's ``general.architecture``, or an error naming the file and the value."""
    name = gguf.architecture
    if name is None:
        raise ConfigError(
            f"GGUF file {gguf.path} has no 'general.architecture' metadata, so its model type is unknown; "
            "re-convert it with a current llama.cpp."
        )
    arch = ARCHITECTURES.get(name)
    if arch is None:
        raise UnknownModelTypeError(
            f"GGUF file {gguf.path} holds a '{name}' model, and microformers-gguf maps no such architecture "
            f"(supported: {', '.join(sorted(ARCHITECTURES))}). Use a checkpoint in safetensors form with a plugin "
            f"for '{name}', or a GGUF of a supported architecture."
        )
    return arch


def hf_tensor_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a llama-family GGUF tensor; ``None`` for tensors the model rebuilds itself."""
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    if _DERIVED_TENSORS.match(gguf_name):
        return None
    match = _BLOCK_NAME.match(gguf_name)
    if match and match.group(2) in _BLOCK_TENSORS:
        return f"model.layers.{match.group(1)}.{_BLOCK_TENSORS[match.group(2)]}"
    return None


def is_derived_tensor(gguf_name: str) -> bool:
    return bool(_DERIVED_TENSORS.match(gguf_name))


def _number(gguf: GGUFFile, key: str, value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        expected = "an integer" if kind is int else "a number"
        raise ConfigError(
            f"GGUF file {gguf.path}: metadata key '{key}' is {value!r}, not {expected}; "
            "the file is corrupt. Re-convert or download it again."
        )
    return kind(value)


def _get(gguf: GGUFFile, key: str, kind: type, default: Any = None) -> Any:
    """Metadata ``key`` as ``kind`` (int or float); ``default`` when absent, a ConfigError when required."""
    value = gguf.metadata.get(key)
    if value is None:
        if default is None:
            raise ConfigError(
                f"GGUF file {gguf.path} lacks the metadata key '{key}', which the model config needs; "
                "the file is incomplete. Re-convert it with a current llama.cpp."
            )
        return default
    if kind is int and isinstance(value, list) and value:
        # Some converters write a per-layer list; the llama family has one value for all layers.
        return max(_number(gguf, key, v, int) for v in value)
    return _number(gguf, key, value, kind)


def _rope(gguf: GGUFFile, prefix: str, theta: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``rope_parameters`` (the current HF form) and the legacy ``rope_scaling`` dict (``None`` if unscaled)."""
    kind = gguf.metadata.get(f"{prefix}rope.scaling.type")
    factor_key = f"{prefix}rope.scaling.factor"
    if factor_key not in gguf.metadata:
        factor_key = f"{prefix}rope.scale_linear"
    factor = _get(gguf, factor_key, float, 1.0)
    if kind is None and factor != 1.0:
        kind = "linear"
    if kind in (None, "none") or not isinstance(kind, str):
        return {"rope_type": "default", "rope_theta": theta}, None
    scaling: dict[str, Any] = {"rope_type": kind, "factor": factor}
    original_key = f"{prefix}rope.scaling.original_context_length"
    if original_key in gguf.metadata:
        scaling["original_max_position_embeddings"] = _get(gguf, original_key, int)
    return {**scaling, "rope_theta": theta}, scaling


def build_config(gguf: GGUFFile) -> dict[str, Any]:
    """A Hugging Face ``config.json``-style dict from the file's metadata and tensor table."""
    arch = architecture_of(gguf)
    md = gguf.metadata
    prefix = f"{arch.gguf_name}."
    hidden_size = _get(gguf, prefix + "embedding_length", int)
    num_heads = _get(gguf, prefix + "attention.head_count", int)
    num_kv_heads = _get(gguf, prefix + "attention.head_count_kv", int, num_heads)
    if hidden_size <= 0 or num_heads <= 0 or num_kv_heads <= 0 or num_heads % num_kv_heads:
        raise ConfigError(
            f"GGUF file {gguf.path} states embedding_length={hidden_size}, head_count={num_heads}, "
            f"head_count_kv={num_kv_heads}, which is not an attention layout; the file is corrupt."
        )
    theta = _get(gguf, prefix + "rope.freq_base", float, 10000.0)
    rope_parameters, rope_scaling = _rope(gguf, prefix, theta)

    tokens = md.get("tokenizer.ggml.tokens")
    embedding = gguf.tensors.get("token_embd.weight")
    fallback_vocab = len(tokens) if isinstance(tokens, list) else embedding.shape[0] if embedding else None
    vocab_size = _get(gguf, prefix + "vocab_size", int, fallback_vocab)

    config: dict[str, Any] = {
        "architectures": [arch.causal_lm_class],
        "model_type": arch.model_type,
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": _get(gguf, prefix + "feed_forward_length", int),
        "num_hidden_layers": _get(gguf, prefix + "block_count", int),
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": _get(gguf, prefix + "context_length", int, 2048),
        "rms_norm_eps": _get(gguf, prefix + "attention.layer_norm_rms_epsilon", float, 1e-6),
        "rope_theta": theta,
        "rope_parameters": rope_parameters,
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
        "attention_bias": "blk.0.attn_q.bias" in gguf.tensors,
    }
    head_dim_key = prefix + "attention.key_length"
    if head_dim_key not in md and arch.head_dim_from_rope:
        head_dim_key = prefix + "rope.dimension_count"
    if head_dim_key in md:
        config["head_dim"] = _get(gguf, head_dim_key, int)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    _check_against_tensors(gguf, prefix, config, head_dim_key if head_dim_key in md else "")
    for name, key in (("bos", "bos"), ("eos", "eos"), ("pad", "padding"), ("unk", "unknown")):
        token_id = md.get(f"tokenizer.ggml.{key}_token_id")
        if isinstance(token_id, int) and not isinstance(token_id, bool):
            config[f"{name}_token_id"] = token_id
    return config


def _check_against_tensors(gguf: GGUFFile, prefix: str, config: dict[str, Any], head_key: str) -> None:
    """Declared sizes must match the tensor table: a corrupt block_count would otherwise build a huge model."""

    def refuse(key: str, value: Any, found: str) -> ConfigError:
        return ConfigError(
            f"GGUF file {gguf.path}: metadata {key}={value}, but {found}. The file is corrupt or was edited; "
            "download or convert it again."
        )

    blocks = {int(m.group(1)) for name in gguf.tensors if (m := _BLOCK_NAME.match(name))}
    layers, hidden, heads = config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"]
    if layers <= 0 or (blocks and layers > max(blocks) + 1):  # (vocab-only files have no tensors)
        raise refuse(f"{prefix}block_count", layers, f"its tensors cover {len(blocks)} blocks")
    embedding = gguf.tensors.get("token_embd.weight")
    if embedding is not None and embedding.shape[-1] != hidden:
        raise refuse(f"{prefix}embedding_length", hidden, f"token_embd.weight has shape {embedding.shape}")
    if embedding is not None and config["vocab_size"] != embedding.shape[0]:
        raise refuse("the vocabulary size", config["vocab_size"], f"token_embd.weight has shape {embedding.shape}")
    up = gguf.tensors.get("blk.0.ffn_up.weight")
    if up is not None and up.shape[0] != config["intermediate_size"]:
        raise refuse(f"{prefix}feed_forward_length", config["intermediate_size"], f"blk.0.ffn_up has shape {up.shape}")
    query = gguf.tensors.get("blk.0.attn_q.weight")
    head_dim = config.get("head_dim", hidden // heads)
    if query is not None and query.shape[0] != heads * head_dim:
        found = f"blk.0.attn_q.weight has shape {query.shape}"
        raise refuse(f"{prefix}attention.head_count x {head_key or 'head dimension'}", f"{heads} x {head_dim}", found)


def qk_row_permutation(rows: int, n_heads: int) -> Any:
    """Row order that undoes llama.cpp's Q/K permutation: ``hf_rows = gguf_rows[perm]``.

    llama.cpp stores each head's rows with the two rotary halves interleaved (row pairs); the
    Hugging Face layout keeps each half contiguous.
    """
    import torch

    if rows % (2 * n_heads):
        raise ConfigError(f"cannot split {rows} attention rows into {n_heads} heads of rotary pairs")
    half = rows // n_heads // 2
    return torch.arange(rows).view(n_heads, half, 2).transpose(1, 2).reshape(-1)

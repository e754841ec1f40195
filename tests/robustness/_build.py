"""Tiny checkpoints for the robustness tests: a Llama folder (safetensors) and a Llama GGUF file."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

LAYERS, HIDDEN, FFN, HEADS, KV_HEADS, VOCAB = 2, 32, 48, 4, 2, 64


def llama_folder(folder: Path, seed: int = 0, max_shard_size: str = "1GB", **overrides: Any) -> Path:
    import torch

    from microformers_llama import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        **overrides,
    )
    LlamaForCausalLM(config).save_pretrained(folder, max_shard_size=max_shard_size)
    return folder


def llama_gguf(
    path: Path,
    seed: int = 0,
    tokens: list[str] | None = None,
    scores: list[float] | None = None,
    strings: dict[str, str] | None = None,
) -> Path:
    """A tiny llama GGUF (F32 tensors, a SentencePiece-style vocabulary without merges)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = tokens or ["<unk>", "<s>", "</s>", *[f"\u2581t{i}" for i in range(VOCAB - 3)]]
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in (
        ("block_count", LAYERS),
        ("context_length", 128),
        ("embedding_length", HIDDEN),
        ("feed_forward_length", FFN),
        ("attention.head_count", HEADS),
        ("attention.head_count_kv", KV_HEADS),
        ("rope.dimension_count", HIDDEN // HEADS),
    ):
        writer.add_uint32(f"llama.{key}", value)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    for key, text in (strings or {}).items():
        writer.add_string(key, text)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores or [float(-i) for i in range(len(tokens))])
    writer.add_token_types([2, 3, 3, *[1] * (len(tokens) - 3)])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    head_dim, vocab = HIDDEN // HEADS, len(tokens)
    shapes = {"token_embd.weight": (vocab, HIDDEN), "output_norm.weight": (HIDDEN,)}
    for i in range(LAYERS):
        shapes.update(
            {
                f"blk.{i}.attn_norm.weight": (HIDDEN,),
                f"blk.{i}.ffn_norm.weight": (HIDDEN,),
                f"blk.{i}.attn_q.weight": (HEADS * head_dim, HIDDEN),
                f"blk.{i}.attn_k.weight": (KV_HEADS * head_dim, HIDDEN),
                f"blk.{i}.attn_v.weight": (KV_HEADS * head_dim, HIDDEN),
                f"blk.{i}.attn_output.weight": (HIDDEN, HEADS * head_dim),
                f"blk.{i}.ffn_gate.weight": (FFN, HIDDEN),
                f"blk.{i}.ffn_up.weight": (FFN, HIDDEN),
                f"blk.{i}.ffn_down.weight": (HIDDEN, FFN),
            }
        )
    for name, shape in shapes.items():
        writer.add_tensor(name, rng.normal(size=shape).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def patch_gguf_u32(data: bytes, key: str, value: int) -> bytes:
    """Overwrite the UINT32 value of metadata ``key`` in GGUF bytes."""
    raw = key.encode()
    at = data.index(struct.pack("<Q", len(raw)) + raw) + 8 + len(raw)
    assert struct.unpack_from("<I", data, at)[0] == 4, "not a UINT32 value"
    return data[: at + 4] + struct.pack("<I", value) + data[at + 8 :]

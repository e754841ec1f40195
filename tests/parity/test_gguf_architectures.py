"""GGUF files of every mapped architecture, written here the way llama.cpp's converter writes them.

Each case draws a tiny random reference model, converts its weights and config to a GGUF file (tensor
names from the ``gguf`` package's own name table, llama.cpp's layout changes applied by hand: Q/K row
interleave, transposed ``Conv1D`` weights, ``1 + w`` norms, stacked experts), then checks that
microformers loads the file into a model whose logits match the original model's, and, where the
reference implementation reads that architecture's GGUF files, that its config, logits and tokenizer
match ours on the same file. The mappings under test live in the architecture plugins
(``register_gguf_architectures``), not in microformers-gguf.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import attrs
import numpy as np
import pytest
import torch

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import make_reference_model, reference_module

gguf = pytest.importorskip("gguf", reason="the GGUF writer is a test dependency (requirements-test.txt)")
pytest.importorskip("transformers")

from gguf.constants import MODEL_ARCH, GGMLQuantizationType  # noqa: E402

import microformers  # noqa: E402

Q = GGMLQuantizationType
TEXTS = ["Hello world", " the theory of everything", "in an  interesting\nline", "rerun: 12345!"]


# -- vocabularies ------------------------------------------------------------------------------------


def _byte_alphabet() -> list[str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = [], 0
    for byte in range(256):
        if byte in printable:
            out.append(chr(byte))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def byte_level_vocab(size: int) -> tuple[list[str], list[str], list[int]]:
    """Control tokens, the 256 byte characters and a few merged pieces (GPT-2 / Qwen style)."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_byte_alphabet()]
    merges = []
    for left, right in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n")]:
        merges.append(f"{left} {right}")
        tokens.append(left + right)
    while len(tokens) < size:
        tokens.append(f"<extra_{len(tokens)}>")
    return tokens, merges, [3, 3, 3] + [1] * (len(tokens) - 3)


def sentencepiece_vocab(size: int, *, gemma: bool = False) -> tuple[list[str], list[float], list[int]]:
    """``<unk> <s> </s>`` (Gemma: ``<pad> <eos> <bos> <unk>``), byte pieces, letters and a few merged pieces."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"] if gemma else ["<unk>", "<s>", "</s>"]
    tokens = [*specials, *(f"<0x{b:02X}>" for b in range(256))]
    types = [3] * len(specials) + [6] * 256
    types[specials.index("<unk>")] = 2
    pieces = ["▁", *"abcdefghilmnorstuvwy", "▁t", "he", "▁the", "in", "▁a", "er", "on", "▁in", "or", "th"]
    if gemma:
        pieces += ["  ", "\n"]  # Gemma files spell whitespace-only pieces with real spaces
    tokens += pieces
    types += [1] * len(pieces)
    while len(tokens) < size:
        tokens.append(f"<extra_{len(tokens)}>")
        types.append(4)
    scores = [0.0] * len(specials) + [0.0] * 256 + [-float(i) for i in range(len(tokens) - len(specials) - 256)]
    return tokens, scores, types


def add_tokenizer(writer: Any, kind: str, vocab: int, pre: str = "default") -> None:
    if kind == "gpt2":
        tokens, merges, types = byte_level_vocab(vocab)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        return
    gemma = kind == "gemma"
    tokens, scores, types = sentencepiece_vocab(vocab, gemma=gemma)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(2 if gemma else 1)
    writer.add_eos_token_id(1 if gemma else 2)
    writer.add_unk_token_id(3 if gemma else 0)
    writer.add_pad_token_id(0 if gemma else 2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


# -- writing a GGUF file like llama.cpp --------------------------------------------------------------


@attrs.frozen
class Case:
    """One architecture's tiny model and how llama.cpp's converter writes it."""

    gguf_arch: str
    model_arch: Any  # gguf.constants.MODEL_ARCH
    config_cls: str
    model_cls: str
    config: dict[str, Any]
    metadata: Callable[[Any, Any], None]  # (writer, reference config)
    tokenizer: str = "gpt2"
    pre: str = "default"
    # (hf name, tensor, config) -> [(gguf name, array)]; default: the name table only
    convert: Callable[[str, torch.Tensor, Any], list[tuple[str, np.ndarray]]] | None = None
    reference_reads_it: bool = True  # the reference loads this architecture's GGUF files
    reference_ignores: tuple[str, ...] = ()  # config fields the reference's GGUF loader does not read
    plugin: str = "microformers_llama"


def _name_map(case: Case, layers: int) -> Any:
    return gguf.get_tensor_name_map(case.model_arch, layers)


def _gguf_name(name_map: Any, hf_name: str) -> str | None:
    stem, _, suffix = hf_name.rpartition(".")
    mapped = name_map.get_name(stem)
    return None if mapped is None else f"{mapped}.{suffix}"


def write_gguf(case: Case, reference: Any, path: Path, qtype: Any = Q.F32) -> Path:
    """``reference``'s weights and config as a GGUF file; 2-D weights in ``qtype`` (norms stay F32)."""
    config = reference.config
    writer = gguf.GGUFWriter(str(path), case.gguf_arch)
    case.metadata(writer, config)
    add_tokenizer(writer, case.tokenizer, config.vocab_size, case.pre)
    name_map = _name_map(case, config.num_hidden_layers)
    tensors: list[tuple[str, np.ndarray]] = []
    for hf_name, tensor in reference.state_dict().items():
        if case.convert is not None:
            tensors.extend(case.convert(hf_name, tensor, config))
            continue
        name = _gguf_name(name_map, hf_name)
        if name is not None:
            tensors.append((name, tensor.float().numpy()))
    if case.convert is None and getattr(config, "tie_word_embeddings", False):
        tensors = [(n, t) for n, t in tensors if n != "output.weight"]
    for name, array in tensors:
        array = np.ascontiguousarray(array, dtype=np.float32)
        if qtype == Q.F32 or array.ndim < 2 or name.endswith("norm.weight"):
            writer.add_tensor(name, array)
        elif qtype == Q.F16 or array.shape[-1] % 32:  # (llama.cpp falls back the same way)
            writer.add_tensor(name, array.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def decoder_metadata(writer: Any, config: Any) -> None:
    """What llama.cpp writes for a llama-like decoder."""
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    head_dim = getattr(config, "head_dim", None)
    if head_dim is not None:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)


def gpt2_metadata(writer: Any, config: Any) -> None:
    writer.add_block_count(config.n_layer)
    writer.add_context_length(config.n_positions)
    writer.add_embedding_length(config.n_embd)
    writer.add_feed_forward_length(4 * config.n_embd)
    writer.add_head_count(config.n_head)
    writer.add_layer_norm_eps(config.layer_norm_epsilon)


def gpt2_convert(hf_name: str, tensor: torch.Tensor, config: Any) -> list[tuple[str, np.ndarray]]:
    """llama.cpp's GPT-2 conversion: Conv1D weights transposed; the embedding also written as the output."""
    name = _gguf_name(gguf.get_tensor_name_map(MODEL_ARCH.GPT2, config.n_layer), hf_name)
    if name is None or hf_name == "lm_head.weight":
        return []
    array = tensor.float().numpy()
    if hf_name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
        array = array.T
    out = [(name, array)]
    if name == "token_embd.weight":
        out.append(("output.weight", array))
    return out


def gemma_metadata(writer: Any, config: Any) -> None:
    """llama.cpp's Gemma 2 / Gemma 3 keys (Gemma 2 writes no rotary base; Gemma 3 the global layers' one)."""
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    if config.model_type == "gemma2":
        writer.add_attn_logit_softcapping(config.attn_logit_softcapping)
        writer.add_final_logit_softcapping(config.final_logit_softcapping)
    else:
        writer.add_rope_freq_base(config.rope_parameters["full_attention"]["rope_theta"])
        if config.final_logit_softcapping:
            writer.add_final_logit_softcapping(config.final_logit_softcapping)
    writer.add_sliding_window(config.sliding_window)


def gemma_convert(arch: Any) -> Callable[[str, torch.Tensor, Any], list[tuple[str, np.ndarray]]]:
    """llama.cpp's Gemma conversion: every norm weight stored as 1 + w; no lm_head (tied)."""

    def convert(hf_name: str, tensor: torch.Tensor, config: Any) -> list[tuple[str, np.ndarray]]:
        name = _gguf_name(gguf.get_tensor_name_map(arch, config.num_hidden_layers), hf_name)
        if name is None or hf_name == "lm_head.weight":
            return []
        array = tensor.float().numpy()
        return [(name, array + 1.0 if hf_name.endswith("norm.weight") else array)]

    return convert


def phi3_metadata(writer: Any, config: Any) -> None:
    """llama.cpp's Phi-3 keys; LongRoPE factors go into tensors (``phi3_convert``)."""
    head_dim = config.hidden_size // config.num_attention_heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_rope_scaling_orig_ctx_len(config.original_max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(int(head_dim * getattr(config, "partial_rotary_factor", 1.0)))
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_sliding_window(config.sliding_window or 0)


def phi3_convert(hf_name: str, tensor: torch.Tensor, config: Any) -> list[tuple[str, np.ndarray]]:
    name = _gguf_name(gguf.get_tensor_name_map(MODEL_ARCH.PHI3, config.num_hidden_layers), hf_name)
    out = [] if name is None else [(name, tensor.float().numpy())]
    scaling = config.rope_parameters
    if hf_name == "model.embed_tokens.weight" and scaling.get("rope_type") == "longrope":
        out.append(("rope_factors_long.weight", np.asarray(scaling["long_factor"], dtype=np.float32)))
        out.append(("rope_factors_short.weight", np.asarray(scaling["short_factor"], dtype=np.float32)))
    return out


def qwen2moe_metadata(writer: Any, config: Any) -> None:
    decoder_metadata(writer, config)
    writer.add_expert_count(config.num_experts)
    writer.add_expert_used_count(config.num_experts_per_tok)
    writer.add_expert_feed_forward_length(config.moe_intermediate_size)
    writer.add_expert_shared_feed_forward_length(config.shared_expert_intermediate_size)


def qwen2moe_convert(hf_name: str, tensor: torch.Tensor, config: Any) -> list[tuple[str, np.ndarray]]:
    """llama.cpp stacks experts per projection (experts first); the reference keeps gate and up fused."""
    array = tensor.float().numpy()
    prefix, _, leaf = hf_name.partition(".mlp.experts.")
    if leaf:
        bid = prefix.rsplit(".", 1)[1]
        if leaf == "gate_up_proj":
            inter = config.moe_intermediate_size
            return [
                (f"blk.{bid}.ffn_gate_exps.weight", array[:, :inter]),
                (f"blk.{bid}.ffn_up_exps.weight", array[:, inter:]),
            ]
        return [(f"blk.{bid}.ffn_down_exps.weight", array)]
    if hf_name.endswith("shared_expert_gate.weight"):  # llama.cpp writes it as a vector
        return [(f"blk.{hf_name.split('.')[2]}.ffn_gate_inp_shexp.weight", array.reshape(-1))]
    name = _gguf_name(gguf.get_tensor_name_map(MODEL_ARCH.QWEN2MOE, config.num_hidden_layers), hf_name)
    return [] if name is None else [(name, array)]


def llama_cpp_permute(array: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's llama converter does to Q/K rows: interleave each head's two rotary halves."""
    return array.reshape(heads, 2, array.shape[0] // heads // 2, *array.shape[1:]).swapaxes(1, 2).reshape(array.shape)


def mixtral_metadata(writer: Any, config: Any) -> None:
    decoder_metadata(writer, config)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_expert_count(config.num_local_experts)
    writer.add_expert_used_count(config.num_experts_per_tok)


def mixtral_convert(hf_name: str, tensor: torch.Tensor, config: Any) -> list[tuple[str, np.ndarray]]:
    """llama.cpp writes Mixtral as ``llama``: Q/K rows interleaved, experts stacked per projection."""
    array = tensor.float().numpy()
    if hf_name.endswith("self_attn.q_proj.weight"):
        array = llama_cpp_permute(array, config.num_attention_heads)
    elif hf_name.endswith("self_attn.k_proj.weight"):
        array = llama_cpp_permute(array, config.num_key_value_heads)
    prefix, _, leaf = hf_name.partition(".mlp.experts.")
    if leaf:
        bid = prefix.rsplit(".", 1)[1]
        if leaf == "gate_up_proj":
            inter = config.intermediate_size
            return [
                (f"blk.{bid}.ffn_gate_exps.weight", array[:, :inter]),
                (f"blk.{bid}.ffn_up_exps.weight", array[:, inter:]),
            ]
        return [(f"blk.{bid}.ffn_down_exps.weight", array)]
    name = _gguf_name(gguf.get_tensor_name_map(MODEL_ARCH.LLAMA, config.num_hidden_layers), hf_name)
    return [] if name is None else [(name, array)]


def mixtral_per_expert_convert(hf_name: str, tensor: torch.Tensor, config: Any) -> list[tuple[str, np.ndarray]]:
    """Older llama.cpp files: one tensor per expert (``blk.N.ffn_gate.E.weight``) instead of stacked ones."""
    out = []
    for name, array in mixtral_convert(hf_name, tensor, config):
        stem, _, stacked = name.rpartition("_exps.weight")
        if stacked == "" and stem:
            out.extend((f"{stem}.{e}.weight", array[e]) for e in range(array.shape[0]))
        else:
            out.append((name, array))
    return out


_GEMMA = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    # head_dim 256 = query_pre_attn_scalar: what llama.cpp assumes and the reference's default
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "vocab_size": 300,
    "max_position_embeddings": 64,
    "sliding_window": 4,
    "pad_token_id": 0,
    "bos_token_id": 2,
    "eos_token_id": 1,
}
_PHI3 = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 300,
    "max_position_embeddings": 64,
    "original_max_position_embeddings": 64,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}


CASES: dict[str, Case] = {
    "qwen3": Case(
        "qwen3",
        MODEL_ARCH.QWEN3,
        "Qwen3Config",
        "Qwen3ForCausalLM",
        # head_dim 128: the reference's GGUF config for qwen3 ignores attention.key_length (its default is 128)
        {
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 128,
            "vocab_size": 300,
            "max_position_embeddings": 128,
            "tie_word_embeddings": False,
        },
        decoder_metadata,
        pre="qwen2",
    ),
    "gpt2": Case(
        "gpt2",
        MODEL_ARCH.GPT2,
        "GPT2Config",
        "GPT2LMHeadModel",
        # n_positions 1024: the reference reads context_length into n_ctx, so its wpe is always the default size
        {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 1024, "vocab_size": 300},
        gpt2_metadata,
        convert=gpt2_convert,
        plugin="microformers_gpt2",
    ),
    "gemma2": Case(
        "gemma2",
        MODEL_ARCH.GEMMA2,
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {**_GEMMA, "num_hidden_layers": 2},
        gemma_metadata,
        tokenizer="gemma",
        convert=gemma_convert(MODEL_ARCH.GEMMA2),
        plugin="microformers_gemma",
    ),
    "gemma3": Case(
        "gemma3",
        MODEL_ARCH.GEMMA3,
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        # 7 layers: five sliding, one global, one sliding (llama.cpp's fixed pattern of six)
        {
            **_GEMMA,
            "num_hidden_layers": 7,
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 50000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        },
        gemma_metadata,
        tokenizer="gemma",
        convert=gemma_convert(MODEL_ARCH.GEMMA3),
        plugin="microformers_gemma",
    ),
    "phi3": Case(
        "phi3",
        MODEL_ARCH.PHI3,
        "Phi3Config",
        "Phi3ForCausalLM",
        _PHI3,
        phi3_metadata,
        tokenizer="spm",
        convert=phi3_convert,
        reference_ignores=("original_max_position_embeddings",),  # (it keeps 4096, the class default)
        plugin="microformers_phi3",
    ),
    "phi3-longrope": Case(
        "phi3",
        MODEL_ARCH.PHI3,
        "Phi3Config",
        "Phi3ForCausalLM",
        {
            **_PHI3,
            "max_position_embeddings": 256,
            "original_max_position_embeddings": 32,
            "rope_scaling": {
                "type": "longrope",
                "long_factor": [1.0, 1.5, 2.0, 4.0],
                "short_factor": [1.0, 1.1, 1.2, 1.3],
            },
        },
        phi3_metadata,
        tokenizer="spm",
        convert=phi3_convert,
        reference_reads_it=False,  # the reference's GGUF loader does not read the LongRoPE factor tensors
        plugin="microformers_phi3",
    ),
    "mixtral": Case(
        "llama",
        MODEL_ARCH.LLAMA,
        "MixtralConfig",
        "MixtralForCausalLM",
        {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 300,
            "max_position_embeddings": 64,
        },
        mixtral_metadata,
        tokenizer="spm",
        convert=mixtral_convert,
        reference_reads_it=False,  # the reference reads a llama file with experts as a Llama without them
        plugin="microformers_mixtral",
    ),
    "mixtral-per-expert": Case(
        "llama",
        MODEL_ARCH.LLAMA,
        "MixtralConfig",
        "MixtralForCausalLM",
        {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_local_experts": 3,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 300,
            "max_position_embeddings": 64,
        },
        mixtral_metadata,
        tokenizer="spm",
        convert=mixtral_per_expert_convert,
        reference_reads_it=False,
        plugin="microformers_mixtral",
    ),
    "qwen2moe": Case(
        "qwen2moe",
        MODEL_ARCH.QWEN2MOE,
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        # the expert widths are the reference's defaults: its GGUF loader does not read expert_*_length
        {
            "hidden_size": 32,
            "intermediate_size": 64,
            "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 300,
            "max_position_embeddings": 64,
        },
        qwen2moe_metadata,
        pre="qwen2",
        convert=qwen2moe_convert,
        plugin="microformers_qwen2_moe",
    ),
}


def reference_model(case: Case, seed: int = 0) -> Any:
    return make_reference_model(case.config_cls, case.model_cls, seed=seed, **case.config)


def ids_for(vocab: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    return torch.randint(3, vocab, (2, 9), generator=generator)


def require_plugin(case: Case) -> None:
    if importlib.util.find_spec(case.plugin) is None:
        pytest.fail(f"{case.plugin} is not installed (scripts/install.sh installs every plugin)")


# -- tests -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_file_loads_into_the_original_model(tmp_path: Path, name: str) -> None:
    """Every tensor comes back under its Hugging Face name with its Hugging Face layout: logits equal the source's."""
    case = CASES[name]
    require_plugin(case)
    reference = reference_model(case)
    write_gguf(case, reference, tmp_path / "m.gguf")
    ours = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf")
    assert ours.config.model_type == reference.config.model_type
    ids = ids_for(reference.config.vocab_size)
    with torch.no_grad():
        expected = reference(ids).logits
        got = ours(ids).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)
    mine = ours.state_dict()
    shared = [key for key in reference.state_dict() if key in mine]
    # the same names, except MoE feed-forwards (the reference fuses experts; Mixtral's are named differently)
    assert not [key for key in reference.state_dict() if key not in mine and ".mlp." not in key]
    for key in shared:
        # Gemma norms went through 1 + w and back, which rounds in float32; the rest is bit for bit
        atol = 1e-6 if case.gguf_arch.startswith("gemma") and key.endswith("norm.weight") else 0.0
        torch.testing.assert_close(mine[key], reference.state_dict()[key].float(), rtol=0, atol=atol, msg=key)


@pytest.mark.parametrize("name", sorted(c for c in CASES if CASES[c].reference_reads_it))
def test_same_file_matches_the_reference_gguf_loader(tmp_path: Path, name: str) -> None:
    """Config fields, logits (quantised Q8_0 weights) and tokenizer agree with the reference reading the same file."""
    case = CASES[name]
    require_plugin(case)
    transformers = reference_module()
    reference = reference_model(case, seed=1)
    write_gguf(case, reference, tmp_path / "q.gguf", qtype=Q.Q8_0)
    ours = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="q.gguf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="q.gguf", dtype=torch.float32)
    ours_config, ref_config = ours.config.to_dict(), theirs.config.to_dict()
    skip = {"tie_word_embeddings", *case.reference_ignores}
    compared = [k for k in case.config if k in ref_config and k not in skip]
    for key in (*compared, "model_type", "bos_token_id", "eos_token_id"):
        assert ours_config.get(key) == ref_config.get(key), key
    ids = ids_for(reference.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, theirs(ids).logits, rtol=0, atol=1e-4)

    our_tok = microformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="q.gguf")
    ref_tok = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="q.gguf")
    for text in TEXTS:
        assert our_tok(text)["input_ids"] == ref_tok(text)["input_ids"], text
        ids = ref_tok(text)["input_ids"]
        assert our_tok.decode(ids) == ref_tok.decode(ids), text


def test_inconsistent_moe_file_is_refused_naming_the_field_and_file(tmp_path: Path) -> None:
    """A Qwen2-MoE file routing each token to more experts than it has is refused before any weight is read."""

    def too_many_experts(writer: Any, config: Any) -> None:
        fields = {name: getattr(config, name, None) for name in dir(config) if not name.startswith("_")}
        qwen2moe_metadata(writer, SimpleNamespace(**{**fields, "num_experts_per_tok": config.num_experts + 1}))

    small = {**CASES["qwen2moe"].config, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64}
    case = attrs.evolve(CASES["qwen2moe"], config=small, metadata=too_many_experts)
    require_plugin(case)
    path = write_gguf(case, reference_model(case), tmp_path / "bad.gguf")
    with pytest.raises(microformers.ConfigError, match="num_experts_per_tok") as info:
        microformers.AutoConfig.from_pretrained(tmp_path, gguf_file="bad.gguf")
    assert str(path) in str(info.value)


def _metadata_only(path: Path, arch: str, values: dict[str, Any]) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in values.items():
        if isinstance(value, str):
            writer.add_string(f"{arch}.{key}", value)
        elif isinstance(value, float):
            writer.add_float32(f"{arch}.{key}", value)
        else:
            writer.add_uint32(f"{arch}.{key}", value)
    add_tokenizer(writer, "gemma" if arch.startswith("gemma") else "spm", 300)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


_SIZES = {"embedding_length": 64, "feed_forward_length": 128, "attention.head_count": 4, "context_length": 128}


@pytest.mark.parametrize(
    ("arch", "values", "expected"),
    [
        # what llama.cpp assumes without stating it: the 27B query scale, Gemma 3's layer pattern and local base
        ("gemma2", {"block_count": 46, "attention.key_length": 128}, {"query_pre_attn_scalar": 16}),
        ("gemma2", {"block_count": 2, "attention.key_length": 128}, {"query_pre_attn_scalar": 128}),
        (
            "gemma3",
            {
                "block_count": 7,
                "attention.key_length": 16,
                "attention.sliding_window": 8,
                "rope.freq_base": 5e5,
                "rope.scaling.type": "linear",
                "rope.scaling.factor": 8.0,
            },
            {
                "layer_types": ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"],
                "sliding_window": 8,
                "rope_parameters": {
                    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 5e5},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                },
            },
        ),
        ("gemma3", {"block_count": 3, "attention.key_length": 16}, {"layer_types": ["full_attention"] * 3}),
        (
            "phi3",
            {"block_count": 2, "rope.dimension_count": 8, "attention.sliding_window": 0},
            {"partial_rotary_factor": 0.5, "sliding_window": None, "original_max_position_embeddings": 128},
        ),
    ],
)
def test_configs_of_what_the_files_leave_implicit(tmp_path: Path, arch: str, values: dict, expected: dict) -> None:
    _metadata_only(tmp_path / "c.gguf", arch, {**_SIZES, **values})
    config = microformers.AutoConfig.from_pretrained(tmp_path, gguf_file="c.gguf")
    for key, value in expected.items():
        assert getattr(config, key) == value, key

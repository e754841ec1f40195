"""Falcon (microformers-falcon) against the reference implementation on tiny random checkpoints.

Cases: multi-query attention with parallel attention and tied embeddings (Falcon-7B's layout); the new decoder
architecture with grouped key/value heads, two norms, biases and an untied head (40B/180B); the new
architecture with one norm (Falcon2-11B); the original per-head QKV layout with sequential residuals.
ALiBi configs are refused. Then GGUF files written from tiny models the way llama.cpp's converter writes
Falcon (QKV rows regrouped), loaded by us and, for the layout its loader reads (multi-query, tied), by the
reference's GGUF loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.decoder_family import DecoderFamilyParity
from parity.harness import (
    assert_close,
    load_ours,
    make_reference_checkpoint,
    make_reference_model,
    random_ids,
)

pytest.importorskip("transformers")

TINY: dict[str, Any] = {
    "vocab_size": 96,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 1,
}

CASES: dict[str, dict[str, Any]] = {
    "multi-query": {},
    "new-arch-two-norms": {
        "new_decoder_architecture": True,
        "num_kv_heads": 2,
        "bias": True,
        "tie_word_embeddings": False,
        "ffn_hidden_size": 48,
    },
    "new-arch-one-norm": {"new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1},
    "original-sequential": {"multi_query": False, "parallel_attn": False, "bias": True, "rope_theta": 500.0},
}


class TestFalconMatchesTheReference(DecoderFamilyParity):
    family, tiny, cases = "Falcon", TINY, CASES

    @pytest.fixture(scope="class", params=list(CASES))
    def case(self, request: pytest.FixtureRequest) -> str:
        return request.param


def test_alibi_config_is_refused_naming_the_setting(tmp_path: Path) -> None:
    from microformers.errors import ConfigError

    folder, _ = make_reference_checkpoint("FalconConfig", "FalconForCausalLM", tmp_path, alibi=True, **TINY)
    with pytest.raises(ConfigError, match="alibi=True"):
        load_ours(folder)


# -- GGUF ------------------------------------------------------------------------------------------


def write_falcon_gguf(reference: Any, path: Path) -> Path:
    """``reference`` as llama.cpp's converter writes a Falcon model (F32): QKV rows regrouped as all queries,
    then all keys, then all values."""
    gguf = pytest.importorskip("gguf")
    from gguf.constants import MODEL_ARCH

    config = reference.config
    heads = config.num_attention_heads
    kv_heads = config.num_kv_heads if config.new_decoder_architecture else 1
    head_dim = config.hidden_size // heads
    writer = gguf.GGUFWriter(str(path), "falcon")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.ffn_hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_eps(config.layer_norm_epsilon)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    tokens = ["<pad>", "<|endoftext|>", *(f"t{i}" for i in range(config.vocab_size - 2))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (len(tokens) - 2))
    writer.add_token_merges([])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(1)
    name_map = gguf.get_tensor_name_map(MODEL_ARCH.FALCON, config.num_hidden_layers)
    for hf_name, tensor in reference.state_dict().items():
        stem, _, suffix = hf_name.rpartition(".")
        mapped = name_map.get_name(stem)
        if mapped is None or (hf_name == "lm_head.weight" and config.tie_word_embeddings):
            continue
        array = tensor.float().numpy()
        if "query_key_value" in hf_name:  # what the converter does: per-group rows -> q rows, k rows, v rows
            grouped = array.reshape(kv_heads, heads // kv_heads + 2, head_dim, -1)
            parts = (grouped[:, :-2], grouped[:, [-2]], grouped[:, [-1]])
            array = np.concatenate([part.reshape(-1, grouped.shape[-1]) for part in parts]).reshape(array.shape)
        writer.add_tensor(f"{mapped}.{suffix}", np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("case", ["multi-query", "new-arch-two-norms", "new-arch-one-norm"])
def test_gguf_file_matches_the_original_model(tmp_path: Path, case: str) -> None:
    import microformers

    reference = make_reference_model("FalconConfig", "FalconForCausalLM", **{**TINY, **CASES[case]})
    write_falcon_gguf(reference, tmp_path / "m.gguf")
    ours = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf").eval()
    assert type(ours).__name__ == "FalconForCausalLM"
    for field in ("new_decoder_architecture", "bias", "tie_word_embeddings", "ffn_hidden_size"):
        assert getattr(ours.config, field) == getattr(reference.config, field), field
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=7)
    with torch.no_grad():
        assert_close(ours(ids).logits, reference(ids).logits, atol=1e-4, what="ours from GGUF vs the original model")


def test_gguf_file_matches_the_reference_gguf_loader(tmp_path: Path) -> None:
    import transformers

    import microformers

    reference = make_reference_model("FalconConfig", "FalconForCausalLM", **TINY)
    write_falcon_gguf(reference, tmp_path / "m.gguf")
    ours = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf").eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf", dtype=torch.float32)
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=7)
    with torch.no_grad():
        assert_close(ours(ids).logits, theirs.eval()(ids).logits, atol=1e-4, what="ours vs reference GGUF loader")

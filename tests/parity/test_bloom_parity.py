"""BLOOM (microformers-bloom) against the reference implementation on tiny random checkpoints.

Cases: the default layout (4 heads, tied embeddings); 6 heads (ALiBi slopes beyond a power of two) with the
residuals taken after the norms and an untied head. Then a GGUF file written from a tiny model the way
llama.cpp's converter writes BLOOM (QKV rows regrouped), loaded by us and by the reference's GGUF loader.
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
    make_reference_model,
    random_ids,
)

pytest.importorskip("transformers")

TINY: dict[str, Any] = {
    "vocab_size": 96,
    "hidden_size": 32,
    "n_layer": 2,
    "n_head": 4,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 1,
}

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "six-heads-post-ln-untied": {
        "n_head": 6,
        "hidden_size": 48,
        "apply_residual_connection_post_layernorm": True,
        "tie_word_embeddings": False,
    },
}


class TestBloomMatchesTheReference(DecoderFamilyParity):
    family, tiny, cases = "Bloom", TINY, CASES

    @pytest.fixture(scope="class", params=list(CASES))
    def case(self, request: pytest.FixtureRequest) -> str:
        return request.param


# -- GGUF ------------------------------------------------------------------------------------------


def write_bloom_gguf(reference: Any, path: Path) -> Path:
    """``reference`` as llama.cpp's converter writes a BLOOM model (F32): QKV rows regrouped as all queries,
    then all keys, then all values; the embeddings also written as the output."""
    gguf = pytest.importorskip("gguf")
    from gguf.constants import MODEL_ARCH

    config = reference.config
    heads = config.n_head
    writer = gguf.GGUFWriter(str(path), "bloom")
    writer.add_context_length(2048)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(4 * config.hidden_size)
    writer.add_block_count(config.n_layer)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_eps(config.layer_norm_epsilon)
    tokens = ["<pad>", "<|endoftext|>", *(f"t{i}" for i in range(config.vocab_size - 2))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (len(tokens) - 2))
    writer.add_token_merges([])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(1)
    name_map = gguf.get_tensor_name_map(MODEL_ARCH.BLOOM, config.n_layer)
    for hf_name, tensor in reference.state_dict().items():
        stem, _, suffix = hf_name.rpartition(".")
        mapped = name_map.get_name(stem) or name_map.get_name(stem.removeprefix("transformer."))
        if mapped is None or (hf_name == "lm_head.weight" and config.tie_word_embeddings):
            continue
        array = tensor.float().numpy()
        if "query_key_value" in hf_name:  # per-head q, k, v -> all q, all k, all v
            per_head = array.reshape(heads, 3, -1, *array.shape[1:])
            array = np.concatenate([per_head[:, i].reshape(-1, *array.shape[1:]) for i in range(3)])
        writer.add_tensor(f"{mapped}.{suffix}", np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# llama.cpp runs BLOOM's usual residuals only (no metadata key for apply_residual_connection_post_layernorm)
GGUF_CASES: dict[str, dict[str, Any]] = {
    "tied": {},
    "six-heads-untied": {"n_head": 6, "hidden_size": 48, "tie_word_embeddings": False},
}


@pytest.mark.parametrize("case", GGUF_CASES)
def test_gguf_file_matches_the_original_model_and_the_reference_gguf_loader(tmp_path: Path, case: str) -> None:
    import transformers

    import microformers

    reference = make_reference_model("BloomConfig", "BloomForCausalLM", **{**TINY, **GGUF_CASES[case]})
    write_bloom_gguf(reference, tmp_path / "m.gguf")
    ours = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf").eval()
    assert type(ours).__name__ == "BloomForCausalLM"
    assert ours.config.tie_word_embeddings == reference.config.tie_word_embeddings
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=7)
    with torch.no_grad():
        assert_close(ours(ids).logits, reference(ids).logits, atol=1e-4, what="ours from GGUF vs the original model")
        if reference.config.tie_word_embeddings:  # the reference's GGUF loader always ties BLOOM's head
            theirs = transformers.AutoModelForCausalLM.from_pretrained(
                tmp_path, gguf_file="m.gguf", dtype=torch.float32
            )
            assert_close(ours(ids).logits, theirs.eval()(ids).logits, atol=1e-4, what="ours vs reference GGUF loader")

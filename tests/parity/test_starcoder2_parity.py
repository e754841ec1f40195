"""StarCoder2 (microformers-starcoder2) against the reference implementation on tiny random checkpoints.

Cases: the default layout (biases everywhere, tied embeddings); no biases with an untied head and
grouped-query attention; a sliding window shorter than the prompts. Then a GGUF file written from a
tiny model the way llama.cpp's converter writes StarCoder2, loaded by us and by the reference's GGUF
loader.
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
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 1,
}

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "no-bias-untied-mqa": {"use_bias": False, "tie_word_embeddings": False, "num_key_value_heads": 1},
    "sliding": {"sliding_window": 3, "hidden_act": "gelu"},
}


class TestStarcoder2MatchesTheReference(DecoderFamilyParity):
    family, tiny, cases = "Starcoder2", TINY, CASES

    @pytest.fixture(scope="class", params=list(CASES))
    def case(self, request: pytest.FixtureRequest) -> str:
        return request.param


# -- GGUF ------------------------------------------------------------------------------------------


def write_starcoder2_gguf(reference: Any, path: Path) -> Path:
    """``reference`` as llama.cpp's converter writes a StarCoder2 model (F32; no row permutation)."""
    gguf = pytest.importorskip("gguf")
    from gguf.constants import MODEL_ARCH

    config = reference.config
    writer = gguf.GGUFWriter(str(path), "starcoder2")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_eps(config.norm_epsilon)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    tokens = ["<pad>", "<|endoftext|>", *(f"t{i}" for i in range(config.vocab_size - 2))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (len(tokens) - 2))
    writer.add_token_merges([])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(1)
    name_map = gguf.get_tensor_name_map(MODEL_ARCH.STARCODER2, config.num_hidden_layers)
    for hf_name, tensor in reference.state_dict().items():
        stem, _, suffix = hf_name.rpartition(".")
        mapped = name_map.get_name(stem)
        if mapped is None or (hf_name == "lm_head.weight" and config.tie_word_embeddings):
            continue
        writer.add_tensor(f"{mapped}.{suffix}", np.ascontiguousarray(tensor.float().numpy()))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("overrides", [{}, {"tie_word_embeddings": False, "use_bias": False}], ids=["tied", "untied"])
def test_gguf_file_matches_the_original_and_the_reference_gguf_loader(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    import transformers

    import microformers

    reference = make_reference_model("Starcoder2Config", "Starcoder2ForCausalLM", **{**TINY, **overrides})
    write_starcoder2_gguf(reference, tmp_path / "m.gguf")
    ours = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf").eval()
    assert type(ours).__name__ == "Starcoder2ForCausalLM"
    assert ours.config.use_bias == reference.config.use_bias
    assert ours.config.tie_word_embeddings == reference.config.tie_word_embeddings
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=7)
    with torch.no_grad():
        want = reference(ids).logits
        assert_close(ours(ids).logits, want, atol=1e-4, what="ours from GGUF vs the original model")
        if overrides.get("use_bias", True):  # the reference's GGUF loader assumes StarCoder2's biases
            theirs = transformers.AutoModelForCausalLM.from_pretrained(
                tmp_path, gguf_file="m.gguf", dtype=torch.float32
            )
            assert_close(ours(ids).logits, theirs.eval()(ids).logits, atol=1e-4, what="ours vs reference GGUF loader")

"""StableLM (microformers-stablelm) against the reference implementation on tiny random checkpoints.

Cases: the default layout (a quarter of each head rotated, sequential residuals, no biases); q/k/v biases
with per-head q/k LayerNorm, half rotary and grouped-query attention (StableLM 2 12B's options);
parallel residual with tied embeddings and full rotary. Then a GGUF file written from a tiny model the
way llama.cpp's converter writes StableLM (per-head norms stacked), loaded by us and by the reference's
GGUF loader.
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
    "qkv-bias-qk-norm": {"use_qkv_bias": True, "qk_layernorm": True, "partial_rotary_factor": 0.5},
    "parallel-tied": {
        "use_parallel_residual": True,
        "tie_word_embeddings": True,
        "num_key_value_heads": 4,
        "partial_rotary_factor": 1.0,
    },
}


class TestStableLmMatchesTheReference(DecoderFamilyParity):
    family, tiny, cases = "StableLm", TINY, CASES

    @pytest.fixture(scope="class", params=list(CASES))
    def case(self, request: pytest.FixtureRequest) -> str:
        return request.param


# -- GGUF ------------------------------------------------------------------------------------------


def write_stablelm_gguf(reference: Any, path: Path) -> Path:
    """``reference`` as llama.cpp's converter writes a StableLM model (F32; no row permutation; the per-head
    q/k norms of a layer stacked into one ``(heads, head_dim)`` tensor)."""
    gguf = pytest.importorskip("gguf")
    from gguf.constants import MODEL_ARCH

    config = reference.config
    writer = gguf.GGUFWriter(str(path), "stablelm")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_eps(config.layer_norm_eps)
    head_dim = config.hidden_size // config.num_attention_heads
    writer.add_rope_dimension_count(int(head_dim * config.rope_parameters["partial_rotary_factor"]))
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    tokens = ["<pad>", "<|endoftext|>", *(f"t{i}" for i in range(config.vocab_size - 2))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (len(tokens) - 2))
    writer.add_token_merges([])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(1)
    name_map = gguf.get_tensor_name_map(MODEL_ARCH.STABLELM, config.num_hidden_layers)
    stacked: dict[str, list[np.ndarray]] = {}
    for hf_name, tensor in reference.state_dict().items():
        if "_layernorm.norms." in hf_name:  # model.layers.{i}.self_attn.q_layernorm.norms.{h}.weight
            bid, which = hf_name.split(".")[2], hf_name.split(".")[4][0]
            stacked.setdefault(f"blk.{bid}.attn_{which}_norm.weight", []).append(tensor.float().numpy())
            continue
        stem, _, suffix = hf_name.rpartition(".")
        mapped = name_map.get_name(stem)
        if mapped is None or (hf_name == "lm_head.weight" and config.tie_word_embeddings):
            continue
        writer.add_tensor(f"{mapped}.{suffix}", np.ascontiguousarray(tensor.float().numpy()))
    for name, heads in stacked.items():
        writer.add_tensor(name, np.ascontiguousarray(np.stack(heads)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


GGUF_CASES = {
    "default": {},
    "parallel-tied": {"use_parallel_residual": True, "tie_word_embeddings": True},
    "qkv-bias-qk-norm": {"use_qkv_bias": True, "qk_layernorm": True},
}


@pytest.mark.parametrize("case", GGUF_CASES)
def test_gguf_file_matches_the_original_and_the_reference_gguf_loader(tmp_path: Path, case: str) -> None:
    overrides = GGUF_CASES[case]
    import transformers

    import microformers

    reference = make_reference_model("StableLmConfig", "StableLmForCausalLM", **{**TINY, **overrides})
    write_stablelm_gguf(reference, tmp_path / "m.gguf")
    ours = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf").eval()
    assert type(ours).__name__ == "StableLmForCausalLM"
    for field in ("use_qkv_bias", "qk_layernorm", "use_parallel_residual", "tie_word_embeddings"):
        assert getattr(ours.config, field) == getattr(reference.config, field), field
    assert ours.config.partial_rotary_factor == reference.config.rope_parameters["partial_rotary_factor"]
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=7)
    with torch.no_grad():
        want = reference(ids).logits
        assert_close(ours(ids).logits, want, atol=1e-4, what="ours from GGUF vs the original model")
        if not overrides.get("qk_layernorm"):  # the reference's GGUF loader does not read stacked q/k norms
            theirs = transformers.AutoModelForCausalLM.from_pretrained(
                tmp_path, gguf_file="m.gguf", dtype=torch.float32
            )
            assert_close(ours(ids).logits, theirs.eval()(ids).logits, atol=1e-4, what="ours vs reference GGUF loader")

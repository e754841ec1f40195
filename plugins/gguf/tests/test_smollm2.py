"""The real SmolLM2-135M-Instruct Q4_1 GGUF: config and every weight equal the reference's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_gguf.format import GGUF_FORMAT

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def files(smollm2_folder: Path) -> list[Path]:
    return GGUF_FORMAT.find(smollm2_folder, gguf_file=SMOLLM2_FILE)


@pytest.mark.slow
def test_config_matches_reference(smollm2_folder: Path, files: list[Path]) -> None:
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoConfig.from_pretrained(smollm2_folder, gguf_file=SMOLLM2_FILE).to_dict()
    config = GGUF_FORMAT.load_config(files)
    for key in (
        "model_type",
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rms_norm_eps",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "unk_token_id",
        "rope_parameters",
    ):
        assert config[key] == reference[key], key
    assert config["rope_theta"] == reference["rope_parameters"]["rope_theta"]
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["attention_bias"] is False and "rope_scaling" not in config


@pytest.mark.slow
def test_every_weight_matches_reference(smollm2_folder: Path, files: list[Path]) -> None:
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2_folder, gguf_file=SMOLLM2_FILE, dtype=torch.float32
    )
    reference: dict[str, Any] = model.state_dict()
    state = GGUF_FORMAT.load(files)
    # The file has no output.weight: lm_head is tied to the embedding, which the model does itself.
    assert set(state) == set(reference) - {"lm_head.weight"}
    for name, tensor in state.items():
        assert tensor.dtype == torch.float32 and tensor.shape == reference[name].shape, name
        torch.testing.assert_close(tensor, reference[name], rtol=0, atol=1e-6, msg=name)
    # exact: the tied head is the same tensor the embedding was loaded from
    assert torch.equal(state["model.embed_tokens.weight"], reference["lm_head.weight"])


def test_bfloat16_load(files: list[Path]) -> None:
    state = GGUF_FORMAT.load(files, dtype=torch.bfloat16)
    assert {t.dtype for t in state.values()} == {torch.bfloat16}
    assert state["model.layers.0.self_attn.q_proj.weight"].shape == (576, 576)
    assert state["model.layers.0.self_attn.k_proj.weight"].shape == (192, 576)
    assert len(state) == 272

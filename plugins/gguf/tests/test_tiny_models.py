"""Tiny llama / qwen2 GGUF files written by the tests: names, Q/K layout, config, against the originals and
against the reference implementation (transformers) reading the same files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType

from microformers_gguf.format import GGUF_FORMAT

Q = GGMLQuantizationType

MIXED_TYPES = {
    "model.embed_tokens.weight": Q.Q8_0,
    "model.layers.0.self_attn.q_proj.weight": Q.Q4_0,
    "model.layers.0.self_attn.k_proj.weight": Q.Q5_1,
    "model.layers.0.mlp.up_proj.weight": Q.Q4_1,
    "model.layers.1.self_attn.q_proj.weight": Q.F16,
    "model.layers.1.self_attn.k_proj.weight": Q.BF16,
    "model.layers.1.mlp.down_proj.weight": Q.Q5_0,
}


@pytest.mark.parametrize(("arch", "bias"), [("llama", False), ("llama", True), ("qwen2", True)])
def test_f32_weights_come_back_exactly_under_hf_names(
    tmp_path: Path, gguf_writer: Callable[..., Path], tiny_weights: Callable[..., dict], arch: str, bias: bool
) -> None:
    """llama.cpp's Q/K row permutation (llama only, biases too) is undone; every tensor returns bit for bit."""
    weights = tiny_weights(1, bias=bias, tied=False)
    path = gguf_writer(tmp_path / f"{arch}.gguf", arch=arch, weights=weights)
    state = GGUF_FORMAT.load([path])
    assert set(state) == set(weights)
    for name, expected in weights.items():
        assert state[name].dtype == torch.float32
        # exact: F32 tensors are copied (rows un-permuted), not computed
        assert np.array_equal(state[name].numpy(), expected), name


def test_permutation_really_applies(
    tmp_path: Path, gguf_writer: Callable[..., Path], tiny_weights: Callable[..., dict]
) -> None:
    """Reading a llama file as if unpermuted gives different Q/K rows: the test above is not vacuous."""
    weights = tiny_weights(2)
    path = gguf_writer(tmp_path / "m.gguf", weights=weights, permute=False)
    state = GGUF_FORMAT.load([path])
    assert not np.array_equal(
        state["model.layers.0.self_attn.q_proj.weight"].numpy(), weights["model.layers.0.self_attn.q_proj.weight"]
    )
    assert np.array_equal(
        state["model.layers.0.self_attn.v_proj.weight"].numpy(), weights["model.layers.0.self_attn.v_proj.weight"]
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, "float16"])
def test_requested_dtype(
    tmp_path: Path, gguf_writer: Callable[..., Path], tiny_weights: Callable[..., dict], dtype: object
) -> None:
    weights = tiny_weights(3)
    path = gguf_writer(tmp_path / "m.gguf", weights=weights, qtypes=MIXED_TYPES)
    full = GGUF_FORMAT.load([path])
    reduced = GGUF_FORMAT.load([path], dtype=dtype)
    target = dtype if isinstance(dtype, torch.dtype) else torch.float16
    for name, tensor in reduced.items():
        assert tensor.dtype == target
        # exact: the same float32 values rounded once to the target dtype, both ways
        assert torch.equal(tensor, full[name].to(target)), name


@pytest.mark.parametrize(
    ("arch", "bias", "tied"), [("llama", False, True), ("llama", True, False), ("qwen2", True, True)]
)
def test_matches_reference_on_tiny_files(
    tmp_path: Path,
    gguf_writer: Callable[..., Path],
    tiny_weights: Callable[..., dict],
    arch: str,
    bias: bool,
    tied: bool,
) -> None:
    transformers = pytest.importorskip("transformers")
    weights = tiny_weights(4, bias=bias, tied=tied)
    path = gguf_writer(tmp_path / "tiny.gguf", arch=arch, weights=weights, qtypes=MIXED_TYPES)
    config = GGUF_FORMAT.load_config([path])
    ref_config = transformers.AutoConfig.from_pretrained(tmp_path, gguf_file=path.name).to_dict()
    for key in (
        "model_type",
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "max_position_embeddings",
        "rms_norm_eps",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
    ):
        assert config[key] == ref_config[key], key
    assert config["rope_theta"] == ref_config["rope_parameters"]["rope_theta"] == 50000.0
    assert config["tie_word_embeddings"] is tied
    assert config["attention_bias"] is bias
    if arch == "llama":
        assert config["head_dim"] == ref_config["head_dim"]

    reference = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=path.name, dtype=torch.float32
    ).state_dict()
    state = GGUF_FORMAT.load([path])
    expected_names = set(reference) - ({"lm_head.weight"} if tied else set())
    if arch == "llama" and bias:
        # The reference drops llama attention biases (its llama config never sets attention_bias);
        # here they load, un-permuted like the weights.
        biases = {name for name in weights if name.endswith(".bias")}
        assert biases and set(state) == expected_names | biases
        for name in biases:
            # exact: F32 tensors are copied (rows un-permuted), not computed
            assert np.array_equal(state.pop(name).numpy(), weights[name]), name
    assert set(state) == expected_names
    for name, tensor in state.items():
        torch.testing.assert_close(tensor, reference[name], rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({}, None),
        ({"llama.rope.scaling.type": "none"}, None),
        (
            {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0},
            {"rope_type": "linear", "factor": 4.0},
        ),
        (
            {
                "llama.rope.scaling.type": "yarn",
                "llama.rope.scaling.factor": 2.0,
                "llama.rope.scaling.original_context_length": 128,
            },
            {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128},
        ),
    ],
)
def test_rope_scaling(tmp_path: Path, gguf_writer: Callable[..., Path], metadata: dict, expected: dict | None) -> None:
    config = GGUF_FORMAT.load_config([gguf_writer(tmp_path / "rope.gguf", weights={}, metadata=metadata)])
    assert config.get("rope_scaling") == expected
    assert config["rope_parameters"] == {**(expected or {"rope_type": "default"}), "rope_theta": 50000.0}


def test_qwen2_config_has_no_rope_head_dim(tmp_path: Path, gguf_writer: Callable[..., Path]) -> None:
    path = gguf_writer(tmp_path / "q.gguf", arch="qwen2", weights={}, metadata={"qwen2.rope.dimension_count": 4})
    config = GGUF_FORMAT.load_config([path])
    assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"]
    assert "head_dim" not in config  # qwen2's rope dimension is not its head size

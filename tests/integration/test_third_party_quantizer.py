"""A quantizer from a third-party plugin (tests/plugins/toyquant, its own entry point) loads and saves checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import microformers
from microformers import AutoModelForCausalLM


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from microformers_llama import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_toy_quantizer_is_discovered_and_used(tiny_folder: Path, tmp_path: Path) -> None:
    reg = microformers.plugins.registry.get("quantizers", "toy_sign")
    assert reg is not None and reg.plugin == "toyquant"
    model = AutoModelForCausalLM.from_pretrained(tiny_folder, quantization_config={"quant_method": "toy_sign"})
    layer = model.model.layers[0].mlp.down_proj
    assert type(layer).__name__ == "SignLinear"
    float_weight = AutoModelForCausalLM.from_pretrained(tiny_folder).model.layers[0].mlp.down_proj.weight
    assert torch.equal(layer.signs, torch.sign(float_weight).to(torch.int8))
    ids = torch.tensor([[1, 4, 9, 16]])
    with torch.no_grad():
        expected = model(ids).logits
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["quantization_config"] == {"quant_method": "toy_sign"}
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert type(reloaded.model.layers[0].mlp.down_proj).__name__ == "SignLinear"
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, expected)  # exact: save/load copies the signs; same code, input

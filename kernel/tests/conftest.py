from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture
def toy_model():
    from microformers_test_toy.modeling_toy import ToyConfig, ToyForCausalLM

    torch.manual_seed(0)
    return ToyForCausalLM(ToyConfig(vocab_size=40, hidden_size=24, num_layers=3))


@pytest.fixture
def saved_toy(toy_model, tmp_path: Path) -> Path:
    folder = tmp_path / "toy"
    toy_model.save_pretrained(folder)
    return folder

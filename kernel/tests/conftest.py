from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from microformers.plugins import Registry


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


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Registry]:
    """``isolated_registry(module, ...)``: an empty registry (no discovery) patched in as each module's ``registry``."""

    def make(*modules: ModuleType) -> Registry:
        fresh = Registry()
        fresh._discovered = True  # only what the test adds
        for module in modules:
            monkeypatch.setattr(module, "registry", fresh)
        return fresh

    return make

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

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


class OneFileFormat:
    """A stand-in checkpoint format whose one JSON file holds the config and the tensors (as GGUF does).

    It remembers the dtype each ``load`` asked for.
    """

    expected = "a .onefile file"

    def __init__(self) -> None:
        self.asked: list[torch.dtype | None] = []

    def find(self, folder: Path, **_: Any) -> list[Path]:
        return sorted(Path(folder).glob("*.onefile"))

    def load_config(self, files: list[Path]) -> dict[str, Any]:
        return json.loads(files[0].read_text())["config"]

    def load(self, files: list[Path], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        self.asked.append(dtype)
        tensors = json.loads(files[0].read_text())["tensors"]
        return {name: torch.tensor(value, dtype=dtype) for name, value in tensors.items()}


@pytest.fixture
def one_file_format(monkeypatch: pytest.MonkeyPatch) -> OneFileFormat:
    """A :class:`OneFileFormat` registered as checkpoint format ``onefile`` (priority 1000) for this test only."""
    from microformers.plugins import registry

    registry.discover()
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))  # the registration below is undone
    fmt = OneFileFormat()
    registry.add("checkpoint_formats", "onefile", fmt, priority=1000)
    return fmt

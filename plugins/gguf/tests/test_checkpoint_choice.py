"""An explicit gguf_file wins over format priority, and a load opens the checkpoint once.

The folder here holds both a ``model.safetensors`` (with config.json) and a GGUF file with different
weights: ``gguf_file=...`` must take config *and* weights from the GGUF file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import microformers
from microformers_gguf.format import GGUF_FORMAT, GGUFFormat


@pytest.fixture
def mixed_folder(tmp_path: Path, gguf_writer: Callable[..., Path], tiny_weights: Callable[..., dict]) -> Path:
    gguf_path = gguf_writer(tmp_path / "tiny.gguf", weights=tiny_weights(1))
    config = GGUF_FORMAT.load_config([gguf_path])
    (tmp_path / "config.json").write_text(json.dumps(config))
    other = {name: torch.from_numpy(np.ascontiguousarray(w)).float() for name, w in tiny_weights(2).items()}
    save_file(other, str(tmp_path / "model.safetensors"))
    return tmp_path


def embedding(model: torch.nn.Module) -> torch.Tensor:
    return model.get_input_embeddings().weight


def test_gguf_file_wins_over_safetensors(mixed_folder: Path, tiny_weights: Callable[..., dict]) -> None:
    from_gguf = microformers.AutoModelForCausalLM.from_pretrained(mixed_folder, gguf_file="tiny.gguf")
    expected = torch.from_numpy(np.asarray(tiny_weights(1)["model.embed_tokens.weight"])).float()
    # exact: F32 weights are copied, not computed
    assert torch.equal(embedding(from_gguf), expected)
    # without the argument, priority picks safetensors: the two sources really differ
    from_safetensors = microformers.AutoModelForCausalLM.from_pretrained(mixed_folder)
    other = torch.from_numpy(np.asarray(tiny_weights(2)["model.embed_tokens.weight"])).float()
    # exact: F32 weights are copied, not computed
    assert torch.equal(embedding(from_safetensors), other)
    assert not torch.equal(expected, other)


def test_checkpoint_is_found_once_per_load(mixed_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_find = GGUFFormat.find

    def counting_find(self: GGUFFormat, folder: Path, **kwargs: object) -> object:
        calls.append(str(kwargs.get("gguf_file")))
        return real_find(self, folder, **kwargs)

    monkeypatch.setattr(GGUFFormat, "find", counting_find)
    microformers.AutoModelForCausalLM.from_pretrained(mixed_folder, gguf_file="tiny.gguf")
    assert calls == ["tiny.gguf"]  # AutoConfig and the model class share one opened checkpoint


def test_auto_config_reads_the_gguf_not_config_json(mixed_folder: Path) -> None:
    (mixed_folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    config = microformers.AutoConfig.from_pretrained(mixed_folder, gguf_file="tiny.gguf")
    assert config.hidden_size == 32
    assert not hasattr(config, "gguf_file")

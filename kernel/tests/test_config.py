from __future__ import annotations

import json

import pytest

import microformers
from microformers import ConfigError, FileMissingError, PretrainedConfig


def test_round_trip_keeps_unknown_keys_auto_map_and_special_tokens(tmp_path):
    original = {
        "model_type": "toy",
        "architectures": ["ToyForCausalLM"],
        "hidden_size": 16,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": [2, 3],
        "pad_token_id": 0,
        "auto_map": {"AutoConfig": "configuration_x.XConfig"},
        "some_vendor_key": {"nested": [1, 2, 3]},
        "id2label": {"0": "NEG", "1": "POS"},
    }
    (tmp_path / "config.json").write_text(json.dumps(original))
    config = microformers.AutoConfig.from_pretrained(tmp_path)
    assert config.dtype == "bfloat16" and config.torch_dtype == "bfloat16"
    assert config.eos_token_id == [2, 3]
    assert config.id2label == {0: "NEG", 1: "POS"} and config.label2id == {"NEG": 0, "POS": 1}
    assert config.some_vendor_key == {"nested": [1, 2, 3]}
    out = tmp_path / "out"
    config.save_pretrained(out)
    saved = json.loads((out / "config.json").read_text())
    for key in ("architectures", "hidden_size", "bos_token_id", "eos_token_id", "auto_map", "some_vendor_key"):
        assert saved[key] == original[key]
    assert saved["dtype"] == "bfloat16" and saved["model_type"] == "toy"
    assert microformers.AutoConfig.from_pretrained(out) == config


def test_kwargs_override_and_num_labels():
    config = PretrainedConfig(num_labels=3, dtype="float16")
    assert config.num_labels == 3 and list(config.id2label.values()) == ["LABEL_0", "LABEL_1", "LABEL_2"]
    assert config.dtype == "float16"


def test_missing_config_names_folder(tmp_path):
    with pytest.raises(FileMissingError, match=r"config\.json not found in folder"):
        microformers.AutoConfig.from_pretrained(tmp_path)


def test_missing_folder(tmp_path):
    with pytest.raises(FileMissingError, match="does not exist"):
        microformers.AutoConfig.from_pretrained(tmp_path / "nope" / "deeper")


def test_malformed_json_names_file_and_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "toy",\n  "hidden_size": }')
    with pytest.raises(ConfigError, match=r"config\.json.*not valid JSON.*line 2"):
        microformers.AutoConfig.from_pretrained(tmp_path)


def test_config_without_model_type(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="no 'model_type'"):
        microformers.AutoConfig.from_pretrained(tmp_path)


def test_hub_cache_layout_offline(tmp_path, monkeypatch):
    """A Hub id resolves from the standard cache layout with HF_HUB_OFFLINE=1 (no network)."""
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-toy"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    (snapshot / "config.json").write_text('{"model_type": "toy", "hidden_size": 12}')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = microformers.AutoConfig.from_pretrained("acme/tiny-toy", cache_dir=cache)
    assert config.hidden_size == 12
    with pytest.raises(FileMissingError, match="offline"):
        microformers.AutoConfig.from_pretrained("acme/other-model", cache_dir=cache)

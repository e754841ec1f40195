"""Qwen3 configs: the reference's defaults, and bad files refused naming the field and the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microformers import AutoConfig, AutoModelForCausalLM
from microformers.errors import ConfigError
from microformers_llama.configuration_qwen3 import Qwen3Config

TINY = {
    "model_type": "qwen3",
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}


def test_defaults_follow_the_reference() -> None:
    config = Qwen3Config()
    assert config.head_dim == 128  # explicit, not hidden_size // heads
    assert Qwen3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2).head_dim == 128
    assert config.layer_attention_bias() == (False, False)
    assert Qwen3Config(attention_bias=True).layer_attention_bias() == (True, True)
    assert config.sliding_window is None  # stored as null unless use_sliding_window


def test_autoconfig_reads_qwen3(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    config = AutoConfig.from_pretrained(tmp_path)
    assert type(config).__name__ == "Qwen3Config"
    assert config.head_dim == 16


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"head_dim": -2}, "head_dim"),
        ({"use_sliding_window": True, "sliding_window": 0}, "sliding_window"),
        ({"layer_types": ["full_attention"]}, "layer_types"),
    ],
)
def test_bad_config_is_refused_naming_field_and_file(tmp_path: Path, change: dict, field: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**TINY, **change}))
    with pytest.raises(ConfigError) as info:
        AutoModelForCausalLM.from_pretrained(tmp_path)
    message = str(info.value)
    assert field in message
    assert "config.json" in message


def test_kernel_names_this_distribution_when_qwen3_is_missing() -> None:
    from microformers import registry

    assert registry.provider_of("configs", "qwen3") == "microformers-llama"

"""Behaviour of ``microformers.modeling`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from microformers import AutoModelForCausalLM, ConfigError, PretrainedConfig
from microformers import modeling as modeling_module
from microformers.plugins import Registry


def test_a_declared_size_larger_than_the_weights_is_refused_with_the_fix(saved_toy: Path) -> None:
    config_json = saved_toy / "config.json"
    config_json.write_text(json.dumps({**json.loads(config_json.read_text()), "vocab_size": 1_000_000}))
    with pytest.raises(ConfigError) as info:
        AutoModelForCausalLM.from_pretrained(saved_toy)
    message = str(info.value)
    assert message.startswith("vocab_size=1000000 in ") and "does not match the weights" in message
    assert message.endswith(
        "The configuration is corrupt or belongs to another checkpoint; fix the value or use the matching files."
    )


class _Quantizer:
    quant_method = "int8"
    description = "a stand-in"

    def __init__(self, spec: dict) -> None:
        self.spec = spec

    def to_dict(self) -> dict:
        return dict(self.spec)


def test_load_in_8bit_alone_picks_the_int8_quantizer_and_both_flags_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = Registry()
    fresh._discovered = True  # only what this test adds
    fresh.add("quantizers", "int8", _Quantizer)
    monkeypatch.setattr(modeling_module, "registry", fresh)
    config = PretrainedConfig()
    quantizer = modeling_module._quantizer(config, load_in_8bit=True)
    assert isinstance(quantizer, _Quantizer) and config.quantization_config == {"quant_method": "int8"}
    with pytest.raises(ConfigError, match=r"^pass one of quantization_config, load_in_8bit=True or load_in_4bit=True$"):
        modeling_module._quantizer(PretrainedConfig(), load_in_8bit=True, load_in_4bit=True)


def test_from_config_accepts_attn_implementation_none(toy_model: torch.nn.Module) -> None:
    model = type(toy_model).from_config(toy_model.config, attn_implementation=None)  # the reference's default
    assert type(model) is type(toy_model)

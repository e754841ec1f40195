"""Behaviour of ``microformers.auto`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from microformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
from microformers import auto as auto_module
from microformers.plugins import Registry


def test_auto_model_applies_config_overrides_and_keeps_dtype_for_loading(saved_toy: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(saved_toy, torch_dtype=torch.float16, output_hidden_states=True)
    assert model.config.output_hidden_states is True  # a config attribute given as a keyword overrides the file
    assert next(model.parameters()).dtype == torch.float16  # torch_dtype is the loading dtype, not a config edit


def test_register_records_the_config_model_and_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = Registry()
    fresh._discovered = True  # only what this test adds
    monkeypatch.setattr(auto_module, "registry", fresh)

    class MutConfig(PretrainedConfig):
        model_type = "mutation_toy"

    class MutModel:
        pass

    AutoModelForCausalLM.register(MutConfig, MutModel)
    assert fresh.require("configs", "mutation_toy") is MutConfig
    assert fresh.require("models", ("mutation_toy", "AutoModelForCausalLM")) is MutModel
    assert fresh.require("architectures", "MutModel") is MutModel


def test_auto_config_for_model_builds_the_registered_class(toy_model: torch.nn.Module) -> None:
    config_class = type(toy_model.config)
    config = AutoConfig.for_model(config_class.model_type, hidden_size=8)
    assert type(config) is config_class and config.hidden_size == 8

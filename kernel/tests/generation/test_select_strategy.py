"""The kernel's whole part of generate(): merge the settings, select a strategy, call it."""

from __future__ import annotations

import pytest

from microformers import GenerationConfig, GenerationError, registry
from microformers.generation import select_strategy


class Marker:
    def __init__(self, name: str, key: str) -> None:
        self.name, self.key = name, key
        self.calls: list[dict] = []

    def applies(self, config: GenerationConfig) -> bool:
        return bool(getattr(config, self.key, False))

    def __call__(self, model, inputs, **kwargs):
        self.calls.append({"inputs": inputs, **kwargs})
        return self.name


@pytest.fixture(scope="module")
def markers():
    low, high = Marker("low", "kernel_select_both"), Marker("high", "kernel_select_both")
    only_low = Marker("only-low", "kernel_select_only_low")
    registry.add("generation_strategies", "kernel-select-low", low, priority=1)
    registry.add("generation_strategies", "kernel-select-high", high, priority=50)
    registry.add("generation_strategies", "kernel-select-only-low", only_low, priority=5)
    return low, high, only_low


def test_highest_priority_strategy_that_applies(markers):
    low, high, only_low = markers
    assert select_strategy(GenerationConfig(kernel_select_both=True)) is high
    assert select_strategy(GenerationConfig(kernel_select_only_low=True)) is only_low
    assert select_strategy(GenerationConfig(kernel_select_both=True, strategy="kernel-select-low")) is low
    assert select_strategy(GenerationConfig(), custom_generate="kernel-select-low") is low


def test_generate_passes_the_merged_config_and_the_raw_call(markers, tiny_model):
    _, high, _ = markers
    tiny_model.generation_config = GenerationConfig(kernel_select_both=True, top_k=3)
    assert tiny_model.generate("raw", max_new_tokens=4, attention_mask="m", tokenizer="t") == "high"
    call = high.calls[-1]
    assert call["inputs"] == "raw"
    assert call["generation_config"].max_new_tokens == 4 and call["generation_config"].top_k == 3
    assert call["model_kwargs"] == {"attention_mask": "m", "tokenizer": "t"}
    assert tiny_model.generation_config.max_new_tokens is None  # the call does not change the model's config


def test_invalid_settings_are_refused_before_any_strategy(markers, tiny_model):
    with pytest.raises(GenerationError, match="top_p"):
        tiny_model.generate(kernel_select_both=True, top_p=2.0)


def test_no_applicable_strategy_names_the_plugin(monkeypatch):
    monkeypatch.setattr(registry, "all", lambda kind: [])
    with pytest.raises(GenerationError, match="pip install microformers-generation"):
        select_strategy(GenerationConfig())

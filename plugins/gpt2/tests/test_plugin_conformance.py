"""microformers-gpt2's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestGpt2PluginConformance(PluginConformanceTests):
    plugin_name = "gpt2"
    registers = (("configs", "gpt2"), ("models", ("gpt2", "AutoModelForCausalLM")))

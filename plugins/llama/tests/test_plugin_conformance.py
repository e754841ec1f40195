"""microformers-llama's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestLlamaPluginConformance(PluginConformanceTests):
    plugin_name = "llama"
    registers = (("configs", "llama"), ("configs", "mistral"), ("configs", "qwen2"))

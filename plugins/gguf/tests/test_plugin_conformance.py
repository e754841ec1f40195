"""microformers-gguf's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestGgufPluginConformance(PluginConformanceTests):
    plugin_name = "gguf"
    registers = (("checkpoint_formats", "gguf"), ("model_sources", "smollm2-135m-instruct"))

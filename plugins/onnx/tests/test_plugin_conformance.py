"""microformers-onnx's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestOnnxPluginConformance(PluginConformanceTests):
    plugin_name = "onnx"
    registers = (("cli_commands", "export"), ("exports", "ORTModelForCausalLM"))

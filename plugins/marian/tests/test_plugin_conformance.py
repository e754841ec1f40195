"""microformers-marian's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestMarianPluginConformance(PluginConformanceTests):
    plugin_name = "marian"
    registers = (("configs", "marian"), ("models", ("marian", "AutoModelForSeq2SeqLM")))

"""microformers-t5's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestT5PluginConformance(PluginConformanceTests):
    plugin_name = "t5"
    registers = (
        ("configs", "t5"),
        ("configs", "mt5"),
        ("configs", "umt5"),
        ("models", ("t5", "AutoModelForSeq2SeqLM")),
        ("models", ("mt5", "AutoModelForSeq2SeqLM")),
        ("models", ("t5", "AutoModelForTextEncoding")),
    )

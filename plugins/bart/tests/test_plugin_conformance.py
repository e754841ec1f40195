"""microformers-bart's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestBartPluginConformance(PluginConformanceTests):
    plugin_name = "bart"
    registers = (
        ("configs", "bart"),
        ("configs", "mbart"),
        ("models", ("bart", "AutoModelForSeq2SeqLM")),
        ("models", ("mbart", "AutoModelForSeq2SeqLM")),
    )

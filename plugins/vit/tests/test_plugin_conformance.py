"""microformers-vit's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestViTPluginConformance(PluginConformanceTests):
    plugin_name = "vit"
    registers = (
        ("configs", "vit"),
        ("models", ("vit", "AutoModelForImageClassification")),
        ("configs", "deit"),
        ("models", ("deit", "AutoModelForImageClassification")),
    )

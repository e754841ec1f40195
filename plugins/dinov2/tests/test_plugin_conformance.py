"""microformers-dinov2's entry point through the SDK's plugin conformance checks."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestDinov2PluginConformance(PluginConformanceTests):
    plugin_name = "dinov2"
    registers = (("configs", "dinov2"), ("models", ("dinov2", "AutoModelForImageClassification")))

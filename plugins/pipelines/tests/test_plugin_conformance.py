"""microformers-pipelines's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestPipelinesPluginConformance(PluginConformanceTests):
    plugin_name = "pipelines"
    registers = (("pipelines", "text-generation"), ("pipelines", "fill-mask"))

"""microformers-generation's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestGenerationPluginConformance(PluginConformanceTests):
    plugin_name = "generation"
    registers = (("generation_strategies", "greedy"), ("generation_strategies", "beam_search"))

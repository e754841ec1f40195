"""microformers-tokenizers's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestTokenizersPluginConformance(PluginConformanceTests):
    plugin_name = "tokenizers"
    registers = (("tokenizers", "fast"),)

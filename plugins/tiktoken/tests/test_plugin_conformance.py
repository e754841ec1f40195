"""microformers-tiktoken's entry point through the SDK's plugin conformance checks."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestTiktokenPluginConformance(PluginConformanceTests):
    plugin_name = "tiktoken"
    registers = (("tokenizers", "tiktoken"),)

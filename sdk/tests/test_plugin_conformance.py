"""microformers-sdk's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestSdkPluginConformance(PluginConformanceTests):
    plugin_name = "sdk"
    registers = (("attention", "sdpa"), ("attention", "eager"))

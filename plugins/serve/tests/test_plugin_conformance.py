"""microformers-serve's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestServePluginConformance(PluginConformanceTests):
    plugin_name = "serve"
    registers = (("cli_commands", "serve"), ("attention", "serve_ragged"))

"""microformers-chat's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestChatPluginConformance(PluginConformanceTests):
    plugin_name = "chat"
    registers = (("cli_commands", "chat"), ("cli_commands", "generate"))

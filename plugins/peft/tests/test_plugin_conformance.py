"""microformers-peft against the SDK's plugin conformance kit."""

from __future__ import annotations

from typing import Any, ClassVar

from microformers_sdk.testing import PluginConformanceTests


class TestPeftPlugin(PluginConformanceTests):
    plugin_name = "peft"
    registers: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("adapters", "LORA"),
        ("exports", "LoraConfig"),
        ("exports", "PeftConfig"),
    )

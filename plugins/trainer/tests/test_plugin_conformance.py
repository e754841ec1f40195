"""microformers-trainer against the SDK's plugin conformance kit."""

from __future__ import annotations

from typing import Any, ClassVar

from microformers_sdk.testing import PluginConformanceTests


class TestTrainerPlugin(PluginConformanceTests):
    plugin_name = "trainer"
    registers: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("callbacks", "jsonl"),
        ("callbacks", "tensorboard"),
        ("exports", "Trainer"),
        ("exports", "TrainingArguments"),
        ("exports", "DataCollatorForLanguageModeling"),
        ("exports", "get_scheduler"),
        ("exports", "Adafactor"),
    )

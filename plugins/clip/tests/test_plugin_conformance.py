"""microformers-clip's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestCLIPPluginConformance(PluginConformanceTests):
    plugin_name = "clip"
    registers = (
        ("configs", "clip"),
        ("models", ("clip", "AutoModelForZeroShotImageClassification")),
        ("models", ("clip", "AutoModelForImageClassification")),
        ("configs", "clip_text_model"),
        ("configs", "clip_vision_model"),
        ("configs", "siglip"),
        ("models", ("siglip", "AutoModelForZeroShotImageClassification")),
        ("configs", "siglip_vision_model"),
    )

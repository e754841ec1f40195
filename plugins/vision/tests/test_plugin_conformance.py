from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestVisionPluginConformance(PluginConformanceTests):
    plugin_name = "vision"
    registers = (
        ("processors", "ViTImageProcessor"),
        ("processors", "BitImageProcessor"),
        ("processors", "DeiTImageProcessor"),
        ("pipelines", "image-classification"),
        ("pipelines", "image-feature-extraction"),
    )

"""microformers-sentencepiece's entry point through the SDK's plugin conformance checks."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestSentencePiecePluginConformance(PluginConformanceTests):
    plugin_name = "sentencepiece"
    registers = (
        ("tokenizers", "spm-t5"),
        ("tokenizers", "spm-mbart"),
        ("tokenizers", "spm-mbart50"),
        ("tokenizers", "spm-marian"),
        ("tokenizers", "sentencepiece"),
    )

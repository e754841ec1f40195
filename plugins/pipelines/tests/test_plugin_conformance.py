"""microformers-pipelines's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestPipelinesPluginConformance(PluginConformanceTests):
    plugin_name = "pipelines"
    registers = (
        ("pipelines", "text-generation"),
        ("pipelines", "fill-mask"),
        ("exports", "Pipeline"),  # microformers.Pipeline: the base class lives here, not in the kernel
        ("exports", "ChunkPipeline"),
    )


def test_microformers_pipeline_is_this_plugins_base_class() -> None:
    import microformers
    import microformers.pipelines as kernel_pipelines
    from microformers_pipelines.base import ChunkPipeline, Pipeline

    assert microformers.Pipeline is Pipeline and microformers.ChunkPipeline is ChunkPipeline
    assert kernel_pipelines.Pipeline is Pipeline  # the old import path resolves through the export
    assert Pipeline.__module__ == "microformers_pipelines.base"

"""microformers-pipelines's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

from microformers_sdk.testing import PluginConformanceTests


class TestPipelinesPluginConformance(PluginConformanceTests):
    plugin_name = "pipelines"
    registers = (
        ("pipelines", "text-generation"),
        ("pipelines", "fill-mask"),
        ("pipelines", "sentence-similarity"),  # packaged default: all-MiniLM-L6-v2
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


def test_a_task_without_a_packaged_model_names_the_references_default_and_how_to_fetch_it() -> None:
    import pytest

    import microformers
    from microformers_pipelines.plugin import REFERENCE_DEFAULTS, TASK_TABLE

    packaged = {task for task, (_, _, default, _) in TASK_TABLE.items() if default is not None}
    assert set(REFERENCE_DEFAULTS) | packaged == set(TASK_TABLE)  # every task: a packaged model or a named default
    with pytest.raises(microformers.ConfigError) as info:
        microformers.pipeline("sentiment-analysis")
    message = str(info.value)
    assert "distilbert/distilbert-base-uncased-finetuned-sst-2-english" in message
    assert "hf download" in message and "AutoModelForSequenceClassification" in message

"""The SDK conformance kits on microformers-bloom: its entry point and every model class."""

from __future__ import annotations

from microformers_bloom.configuration_bloom import BloomConfig
from microformers_bloom.modeling_bloom import BloomForCausalLM, BloomForSequenceClassification, BloomModel
from microformers_sdk.testing import (
    ModelConformanceTests,
    PluginConformanceTests,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "n_layer": 2,
    "n_head": 4,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 1,
}


class TestBloomConformance(ModelConformanceTests):
    config_class = BloomConfig
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (BloomModel, BloomForCausalLM, BloomForSequenceClassification)
    padding_side = "left"


class TestBloomPostLayernormResidualConformance(ModelConformanceTests):
    config_class = BloomConfig
    config_kwargs = {
        **TINY,
        "n_head": 8,
        "apply_residual_connection_post_layernorm": True,
        "tie_word_embeddings": False,
    }
    model_classes = (BloomForCausalLM,)
    padding_side = "left"


class TestBloomPluginConformance(PluginConformanceTests):
    plugin_name = "bloom"
    registers = (("configs", "bloom"), ("gguf_architectures", "bloom"))

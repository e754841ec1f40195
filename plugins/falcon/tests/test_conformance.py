"""The SDK conformance kits on microformers-falcon: its entry point and every model class (each attention layout)."""

from __future__ import annotations

from microformers_falcon.configuration_falcon import FalconConfig
from microformers_falcon.modeling_falcon import FalconForCausalLM, FalconForSequenceClassification, FalconModel
from microformers_sdk.testing import (
    ModelConformanceTests,
    PluginConformanceTests,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 1,
}


class TestFalconMultiQueryConformance(ModelConformanceTests):
    config_class = FalconConfig
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (FalconModel, FalconForCausalLM, FalconForSequenceClassification)
    padding_side = "left"


class TestFalconNewArchitectureConformance(ModelConformanceTests):
    config_class = FalconConfig
    config_kwargs = {**TINY, "new_decoder_architecture": True, "num_kv_heads": 2, "bias": True}
    model_classes = (FalconForCausalLM,)
    padding_side = "left"


class TestFalconOriginalSequentialConformance(ModelConformanceTests):
    config_class = FalconConfig
    config_kwargs = {**TINY, "multi_query": False, "parallel_attn": False, "tie_word_embeddings": False}
    model_classes = (FalconForCausalLM,)
    padding_side = "left"


class TestFalconPluginConformance(PluginConformanceTests):
    plugin_name = "falcon"
    registers = (("configs", "falcon"), ("gguf_architectures", "falcon"))

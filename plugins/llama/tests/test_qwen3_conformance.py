"""The SDK conformance kits on microformers-qwen3: its model classes and its entry point."""

from __future__ import annotations

from microformers_qwen3.configuration_qwen3 import Qwen3Config
from microformers_qwen3.modeling_qwen3 import Qwen3ForCausalLM, Qwen3ForSequenceClassification, Qwen3Model
from microformers_sdk.testing import ModelConformanceTests, PluginConformanceTests

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}


class TestQwen3Conformance(ModelConformanceTests):
    config_class = Qwen3Config
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (Qwen3Model, Qwen3ForCausalLM, Qwen3ForSequenceClassification)
    padding_side = "left"


class TestQwen3PluginConformance(PluginConformanceTests):
    plugin_name = "qwen3"
    registers = (("configs", "qwen3"),)

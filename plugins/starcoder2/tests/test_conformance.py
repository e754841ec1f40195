"""The SDK conformance kits on microformers-starcoder2: its entry point and every model class."""

from __future__ import annotations

from microformers_sdk.testing import (
    ModelConformanceTests,
    PluginConformanceTests,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)
from microformers_starcoder2.configuration_starcoder2 import Starcoder2Config
from microformers_starcoder2.modeling_starcoder2 import (
    Starcoder2ForCausalLM,
    Starcoder2ForSequenceClassification,
    Starcoder2Model,
)

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 1,
}


class TestStarcoder2Conformance(ModelConformanceTests):
    config_class = Starcoder2Config
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (Starcoder2Model, Starcoder2ForCausalLM, Starcoder2ForSequenceClassification)
    padding_side = "left"


class TestStarcoder2SlidingNoBiasConformance(ModelConformanceTests):
    config_class = Starcoder2Config
    config_kwargs = {**TINY, "sliding_window": 5, "use_bias": False, "tie_word_embeddings": False}
    model_classes = (Starcoder2ForCausalLM,)
    padding_side = "left"


class TestStarcoder2PluginConformance(PluginConformanceTests):
    plugin_name = "starcoder2"
    registers = (("configs", "starcoder2"), ("gguf_architectures", "starcoder2"))

"""The SDK conformance kits on microformers-stablelm: its entry point and every model class (each layout option)."""

from __future__ import annotations

from microformers_sdk.testing import (
    ModelConformanceTests,
    PluginConformanceTests,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)
from microformers_stablelm.configuration_stablelm import StableLmConfig
from microformers_stablelm.modeling_stablelm import (
    StableLmForCausalLM,
    StableLmForSequenceClassification,
    StableLmModel,
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


class TestStableLmConformance(ModelConformanceTests):
    config_class = StableLmConfig
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (StableLmModel, StableLmForCausalLM, StableLmForSequenceClassification)
    padding_side = "left"


class TestStableLmParallelQkNormConformance(ModelConformanceTests):
    config_class = StableLmConfig
    config_kwargs = {
        **TINY,
        "use_parallel_residual": True,
        "qk_layernorm": True,
        "use_qkv_bias": True,
        "tie_word_embeddings": True,
    }
    model_classes = (StableLmForCausalLM,)
    padding_side = "left"


class TestStableLmPluginConformance(PluginConformanceTests):
    plugin_name = "stablelm"
    registers = (("configs", "stablelm"), ("gguf_architectures", "stablelm"))

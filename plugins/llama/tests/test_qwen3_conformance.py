"""The SDK conformance kits on Qwen3 model classes of microformers-llama."""

from __future__ import annotations

from microformers_llama.configuration_qwen3 import Qwen3Config
from microformers_llama.modeling_qwen3 import Qwen3ForCausalLM, Qwen3ForSequenceClassification, Qwen3Model
from microformers_sdk.testing import ModelConformanceTests

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

    registers = (("configs", "qwen3"),)

"""The SDK conformance suite on each Llama-family model class."""

from __future__ import annotations

from microformers_llama.configuration_llama import LlamaConfig
from microformers_llama.configuration_mistral import MistralConfig
from microformers_llama.configuration_qwen2 import Qwen2Config
from microformers_llama.modeling_llama import LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel
from microformers_llama.modeling_mistral import MistralForCausalLM
from microformers_llama.modeling_qwen2 import Qwen2ForCausalLM
from microformers_sdk.testing import ModelConformanceTests

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}


class TestLlamaConformance(ModelConformanceTests):
    config_class = LlamaConfig
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (LlamaModel, LlamaForCausalLM, LlamaForSequenceClassification)
    padding_side = "left"


class TestMistralConformance(ModelConformanceTests):
    config_class = MistralConfig
    config_kwargs = {**TINY, "sliding_window": 3}
    model_classes = (MistralForCausalLM,)
    padding_side = "left"


class TestQwen2Conformance(ModelConformanceTests):
    config_class = Qwen2Config
    config_kwargs = {
        **TINY,
        "tie_word_embeddings": True,
        "use_sliding_window": True,
        "sliding_window": 3,
        "max_window_layers": 1,
    }
    model_classes = (Qwen2ForCausalLM,)
    padding_side = "left"

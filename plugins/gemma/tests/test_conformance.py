"""The SDK conformance kits on the Gemma 2 and Gemma 3 model classes (windows shorter than the test inputs)."""

from __future__ import annotations

from microformers_gemma.configuration_gemma2 import Gemma2Config
from microformers_gemma.configuration_gemma3 import Gemma3TextConfig
from microformers_gemma.modeling_gemma2 import Gemma2ForCausalLM, Gemma2ForSequenceClassification, Gemma2Model
from microformers_gemma.modeling_gemma3 import Gemma3ForCausalLM, Gemma3TextForSequenceClassification, Gemma3TextModel
from microformers_sdk.testing import (
    ModelConformanceTests,
    PluginConformanceTests,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)

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
    "sliding_window": 3,  # shorter than the kit's inputs (7 tokens, 8 in the cache check)
    "query_pre_attn_scalar": 24,
    "num_labels": 3,
}


class TestGemma2Conformance(ModelConformanceTests):
    config_class = Gemma2Config
    config_kwargs = {**TINY, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 5.0}
    model_classes = (Gemma2Model, Gemma2ForCausalLM, Gemma2ForSequenceClassification)
    padding_side = "left"


class TestGemma3Conformance(ModelConformanceTests):
    config_class = Gemma3TextConfig
    config_kwargs = {**TINY, "layer_types": ["sliding_attention", "full_attention"]}
    model_classes = (Gemma3TextModel, Gemma3ForCausalLM, Gemma3TextForSequenceClassification)
    padding_side = "left"


class TestGemmaPluginConformance(PluginConformanceTests):
    plugin_name = "gemma"
    registers = (("configs", "gemma2"), ("configs", "gemma3_text"))

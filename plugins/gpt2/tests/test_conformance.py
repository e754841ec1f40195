"""microformers-gpt2 through the SDK's conformance kit."""

from __future__ import annotations

from microformers_gpt2.configuration_gpt2 import GPT2Config
from microformers_gpt2.modeling_gpt2 import GPT2ForSequenceClassification, GPT2LMHeadModel, GPT2Model
from microformers_sdk.testing import ModelConformanceTests


class TestGPT2Conformance(ModelConformanceTests):
    config_class = GPT2Config
    config_kwargs = {
        "vocab_size": 64,
        "n_embd": 32,
        "n_layer": 2,
        "n_head": 4,
        "n_positions": 32,
        "num_labels": 3,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    model_classes = (GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification)
    padding_side = "left"


class TestGPT2UntiedConformance(ModelConformanceTests):
    config_class = GPT2Config
    config_kwargs = {**TestGPT2Conformance.config_kwargs, "tie_word_embeddings": False, "n_inner": 40}
    model_classes = (GPT2LMHeadModel,)
    padding_side = "left"

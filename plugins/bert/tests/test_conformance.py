"""microformers-bert through the SDK's conformance kit."""

from __future__ import annotations

from microformers_bert.configuration_bert import BertConfig
from microformers_bert.modeling_bert import (
    BertForMaskedLM,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertLMHeadModel,
    BertModel,
)
from microformers_sdk.testing import ModelConformanceTests


class TestBertConformance(ModelConformanceTests):
    config_class = BertConfig
    config_kwargs = {
        "vocab_size": 64,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 48,
        "max_position_embeddings": 32,
        "num_labels": 3,
    }
    model_classes = (
        BertModel,
        BertForMaskedLM,
        BertForPreTraining,
        BertForNextSentencePrediction,
        BertForSequenceClassification,
        BertForTokenClassification,
    )
    padding_side = "right"  # absolute positions count from the first token
    # BertModel's forward takes past_key_values / use_cache, but an encoder keeps no cache: the decoder
    # configuration below runs the cache check.
    test_cache_equivalence = None


class TestBertDecoderConformance(ModelConformanceTests):
    """``is_decoder=True``: causal self-attention with a KV cache (BertLMHeadModel generates with it)."""

    config_class = BertConfig
    config_kwargs = {**TestBertConformance.config_kwargs, "is_decoder": True}
    # BertModel's decoder path is what BertLMHeadModel runs (its pooler reads the first token of each call,
    # which is no function of the cached sequence, so BertModel itself is not checked here).
    model_classes = (BertLMHeadModel,)
    padding_side = "right"


class TestBertQuestionAnsweringConformance(ModelConformanceTests):
    config_class = BertConfig
    config_kwargs = {**TestBertConformance.config_kwargs, "num_labels": 2}
    model_classes = (BertForQuestionAnswering,)

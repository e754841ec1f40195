"""The SDK conformance kits on microformers-phi3: its entry point and every model class (plain and LongRoPE configs)."""

from __future__ import annotations

from microformers_phi3.configuration_phi3 import Phi3Config
from microformers_phi3.modeling_phi3 import (
    Phi3ForCausalLM,
    Phi3ForSequenceClassification,
    Phi3ForTokenClassification,
    Phi3Model,
)
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
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "eos_token_id": 1,
}

# LongRoPE with half of each head rotated. One factor set applies to a whole forward call (chosen by its
# longest position), so the kit's padded and cached comparisons hold when every call is on one side of the
# original length: 64 (short factors throughout) and 1 (long factors throughout; the crossing is tested
# against the reference in tests/parity/test_phi3_parity.py).
LONGROPE = {
    "partial_rotary_factor": 0.5,
    "rope_scaling": {
        "rope_type": "longrope",
        "short_factor": [1.0, 2.0],
        "long_factor": [3.0, 5.0],
        "attention_factor": 1.2,
    },
}


class TestPhi3Conformance(ModelConformanceTests):
    config_class = Phi3Config
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (Phi3Model, Phi3ForCausalLM, Phi3ForSequenceClassification)
    padding_side = "left"


class TestPhi3TokenClassificationConformance(ModelConformanceTests):
    config_class = Phi3Config
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (Phi3ForTokenClassification,)
    padding_side = "left"
    # Like the reference's token classifier it returns no past_key_values (TokenClassifierOutput has none).
    test_cache_equivalence = None


class TestPhi3ShortFactorConformance(ModelConformanceTests):
    config_class = Phi3Config
    config_kwargs = {**TINY, **LONGROPE, "original_max_position_embeddings": 64, "sliding_window": 5}
    model_classes = (Phi3ForCausalLM,)
    padding_side = "left"


class TestPhi3LongFactorConformance(ModelConformanceTests):
    config_class = Phi3Config
    config_kwargs = {**TINY, **LONGROPE, "original_max_position_embeddings": 1}
    model_classes = (Phi3ForCausalLM,)
    padding_side = "left"


class TestPhi3PluginConformance(PluginConformanceTests):
    plugin_name = "phi3"
    registers = (("configs", "phi3"),)

"""microformers-starcoder2 behaviour not covered by the conformance kit: config checks, dropout in training,
the rotary settings' two spellings."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from microformers.errors import ConfigError
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from microformers_starcoder2 import Starcoder2Config, Starcoder2ForCausalLM

TINY: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"hidden_size": 30}, "hidden_size=30"),
        ({"num_key_value_heads": 3}, "num_key_value_heads=3"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"residual_dropout": 1.5}, "residual_dropout=1.5"),
        ({"hidden_act": "nope"}, None),
    ],
)
def test_bad_config_is_refused_naming_the_field(overrides: dict[str, Any], named: str | None) -> None:
    if named is None:  # an unknown activation is refused when the model is built
        with pytest.raises(ConfigError, match="hidden_act='nope'"):
            Starcoder2ForCausalLM(Starcoder2Config(**{**TINY, **overrides}))
        return
    with pytest.raises(ConfigError, match=named):
        Starcoder2Config(**{**TINY, **overrides})


def test_rope_parameters_spelling_is_read_and_shown() -> None:
    config = Starcoder2Config(**TINY, rope_parameters={"rope_type": "default", "rope_theta": 999999.0})
    assert config.rope_theta == 999999.0
    assert config.rope_parameters == {"rope_type": "default", "rope_theta": 999999.0}


def test_use_bias_false_builds_bias_free_linears() -> None:
    model = Starcoder2ForCausalLM(Starcoder2Config(**TINY, use_bias=False))
    names = [name for name, _ in model.named_parameters()]
    assert not any(name.endswith("proj.bias") or name.endswith("c_fc.bias") for name in names)
    assert "model.layers.0.input_layernorm.bias" in names  # LayerNorms keep theirs


def test_dropouts_apply_in_training_only() -> None:
    config = Starcoder2Config(**TINY, embedding_dropout=0.5, residual_dropout=0.5)
    model = Starcoder2ForCausalLM(config)
    ids = torch.tensor([[3, 4, 5, 6]])
    model.eval()
    with torch.no_grad():
        # exact: eval mode runs no dropout, so two calls are the same computation
        assert torch.equal(model(ids).logits, model(ids).logits)
        model.train()
        torch.manual_seed(0)
        first = model(ids).logits
        torch.manual_seed(1)
        assert not torch.allclose(first, model(ids).logits)

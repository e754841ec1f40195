"""microformers-stablelm behaviour not covered by the conformance kit: config checks, the rotary settings'
spellings, which parameters each layout option builds, dropout in training."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from microformers.errors import ConfigError
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from microformers_stablelm import StableLmConfig, StableLmForCausalLM

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
        ({"partial_rotary_factor": 0.0}, "partial_rotary_factor=0.0"),
        ({"partial_rotary_factor": 1.5}, "partial_rotary_factor=1.5"),
        ({"hidden_dropout": 1.0}, "hidden_dropout=1.0"),
    ],
)
def test_bad_config_is_refused_naming_the_field(overrides: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        StableLmConfig(**{**TINY, **overrides})


def test_partial_rotary_factor_is_read_from_rope_parameters_and_shown_there() -> None:
    config = StableLmConfig(
        **TINY,
        partial_rotary_factor=None,
        rope_theta=None,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5},
    )
    assert (config.rope_theta, config.partial_rotary_factor) == (500.0, 0.5)
    assert config.rope_parameters == {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}
    assert StableLmConfig(**TINY).partial_rotary_factor == 0.25  # the reference's default


def test_layout_options_build_their_parameters() -> None:
    plain = dict(StableLmForCausalLM(StableLmConfig(**TINY)).named_parameters())
    assert "model.layers.0.post_attention_layernorm.bias" in plain
    assert "model.layers.0.self_attn.q_proj.bias" not in plain
    assert not any("q_layernorm" in name for name in plain)
    options = StableLmConfig(**TINY, use_parallel_residual=True, use_qkv_bias=True, qk_layernorm=True)
    full = dict(StableLmForCausalLM(options).named_parameters())
    assert "model.layers.0.post_attention_layernorm.weight" not in full
    assert "model.layers.0.self_attn.q_proj.bias" in full
    assert "model.layers.0.self_attn.o_proj.bias" not in full
    assert "model.layers.0.self_attn.q_layernorm.norms.3.weight" in full
    assert "model.layers.0.self_attn.k_layernorm.norms.1.weight" in full
    assert "model.layers.0.self_attn.k_layernorm.norms.2.weight" not in full  # one norm per key/value head


def test_hidden_dropout_applies_in_training_only() -> None:
    model = StableLmForCausalLM(StableLmConfig(**TINY, hidden_dropout=0.5))
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

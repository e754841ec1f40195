"""microformers-falcon behaviour not covered by the conformance kit: config checks (ALiBi refused), the layouts'
parameters and key/value heads, the GGUF QKV regrouping, dropout in training."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from microformers.errors import ConfigError
from microformers_falcon import FalconConfig, FalconForCausalLM
from microformers_falcon.gguf_mapping import GroupedQKV
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)

TINY: dict[str, Any] = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"alibi": True}, "alibi=True"),
        ({"hidden_size": 30}, "hidden_size=30"),
        ({"new_decoder_architecture": True, "num_kv_heads": 3}, "num_kv_heads=3"),
        ({"new_decoder_architecture": True, "parallel_attn": False}, "parallel_attn"),
        ({"num_ln_in_parallel_attn": 3}, "num_ln_in_parallel_attn=3"),
        ({"hidden_dropout": -0.1}, "hidden_dropout=-0.1"),
        ({"head_dim": 16}, "head_dim=16 disagrees"),
    ],
)
def test_bad_config_is_refused_naming_the_field(overrides: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        FalconConfig(**{**TINY, **overrides})


def test_a_stated_head_dim_that_agrees_is_accepted() -> None:
    assert FalconConfig(**TINY, head_dim=8).head_dim == 8


@pytest.mark.parametrize(
    ("overrides", "kv_heads", "norms"),
    [
        ({}, 1, {"input_layernorm"}),
        ({"multi_query": False}, 4, {"input_layernorm"}),
        ({"parallel_attn": False}, 1, {"input_layernorm", "post_attention_layernorm"}),
        ({"new_decoder_architecture": True, "num_kv_heads": 2}, 2, {"ln_attn", "ln_mlp"}),
        ({"new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1}, 2, {"input_layernorm"}),
    ],
)
def test_layouts_build_their_projection_and_norms(overrides: dict[str, Any], kv_heads: int, norms: set[str]) -> None:
    config = FalconConfig(**{**TINY, **overrides})
    assert config.key_value_heads == kv_heads
    layer = FalconForCausalLM(config).transformer.h[0]
    assert layer.self_attention.query_key_value.weight.shape == ((4 + 2 * kv_heads) * 8, 32)
    assert {name.split(".")[0] for name, _ in layer.named_parameters() if "norm" in name or "ln_" in name} == norms
    key, value = layer.self_attention.project(torch.randn(1, 3, 32))[1:]
    assert key.shape == value.shape == (1, kv_heads, 3, 8)


def test_grouped_qkv_undoes_the_converters_regrouping() -> None:
    config = {"num_attention_heads": 4, "num_kv_heads": 2, "hidden_size": 8}  # head_dim 2, groups of 2 queries
    rows = torch.arange(16.0)  # HF order: group 0 = q0 q1 k0 v0, group 1 = q2 q3 k1 v1 (2 rows each)
    q = torch.cat([rows[0:4], rows[8:12]])
    k = torch.cat([rows[4:6], rows[12:14]])
    v = torch.cat([rows[6:8], rows[14:16]])
    # exact: a permutation of rows
    assert torch.equal(GroupedQKV().apply(torch.cat([q, k, v]), config), rows)
    matrix = torch.cat([q, k, v])[:, None].expand(16, 3)
    assert torch.equal(GroupedQKV().apply(matrix, config), rows[:, None].expand(16, 3))


def test_dropouts_apply_in_training_only() -> None:
    model = FalconForCausalLM(FalconConfig(**TINY, hidden_dropout=0.5, attention_dropout=0.5, parallel_attn=False))
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

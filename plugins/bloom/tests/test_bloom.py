"""microformers-bloom behaviour not covered by the conformance kit: config checks and names, ALiBi slopes,
the GGUF QKV reordering, dropout in training."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from microformers.errors import ConfigError
from microformers_bloom import BloomConfig, BloomForCausalLM
from microformers_bloom.gguf_mapping import PerHeadQKV
from microformers_bloom.modeling_bloom import alibi_slopes
from microformers_sdk.testing import assert_close, one_thread  # noqa: F401  (an autouse fixture, found by name)

TINY: dict[str, Any] = {"vocab_size": 64, "hidden_size": 32, "n_layer": 2, "n_head": 4}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"hidden_size": 30}, "hidden_size=30"),
        ({"n_head": 0}, "n_head"),
        ({"attention_dropout": 2}, "attention_dropout=2"),
        ({"head_dim": 16}, "head_dim=16 disagrees"),
    ],
)
def test_bad_config_is_refused_naming_the_field(overrides: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        BloomConfig(**{**TINY, **overrides})


def test_generic_names_read_the_files_names() -> None:
    config = BloomConfig(**TINY)
    assert (config.num_hidden_layers, config.num_attention_heads, config.head_dim) == (2, 4, 8)
    assert "n_layer" in config.to_dict()
    assert BloomConfig(**TINY, head_dim=8).head_dim == 8  # a stated head size that agrees is accepted


def test_alibi_slopes_for_powers_of_two_and_between() -> None:
    assert_close(alibi_slopes(4), torch.tensor([0.25, 0.0625, 0.015625, 0.00390625]))
    # 6 heads: the 4-head series, then every other slope of the 8-head series (2^-1, 2^-3)
    assert_close(alibi_slopes(6)[4:], torch.tensor([2**-1, 2**-3]))


def test_per_head_qkv_undoes_the_converters_reordering() -> None:
    rows = torch.arange(12.0)  # HF order for 2 heads of size 2: q0 k0 v0 q1 k1 v1
    q, k, v = torch.cat([rows[0:2], rows[6:8]]), torch.cat([rows[2:4], rows[8:10]]), torch.cat([rows[4:6], rows[10:12]])
    # exact: a permutation of rows
    assert torch.equal(PerHeadQKV().apply(torch.cat([q, k, v]), {"n_head": 2}), rows)


def test_dropouts_apply_in_training_only() -> None:
    model = BloomForCausalLM(BloomConfig(**TINY, hidden_dropout=0.5))
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

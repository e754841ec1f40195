"""Behaviour of ``microformers_sdk.layers`` that the mutation pass found unasserted (docs/reliability.md).

Activations are checked against the reference's (``transformers.activations``, a test oracle only);
the MLPs and ``row_linear`` against the plain products they stand for.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from microformers_sdk.layers import ACTIVATIONS, FusedGatedMLP, GatedMLP, OffsetRMSNorm, row_linear

X = torch.linspace(-4.0, 4.0, 41)  # includes 0


@pytest.mark.parametrize("name", ["gelu_new", "gelu_fast", "quick_gelu"])
def test_gelu_variants_match_the_reference(name: str) -> None:
    from transformers.activations import ACT2FN

    torch.testing.assert_close(ACTIVATIONS[name](X), ACT2FN[name](X), atol=1e-6, rtol=1e-6)


def test_norm_and_mlp_defaults_are_the_references() -> None:
    assert OffsetRMSNorm(4).eps == 1e-6  # Gemma's RMSNorm default
    torch.manual_seed(0)
    mlp = GatedMLP(4, 6)  # act defaults to silu, no biases
    x = torch.randn(2, 3, 4)
    assert mlp.gate_proj.bias is None
    torch.testing.assert_close(mlp(x), mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x)))


def test_fused_gated_mlp_is_the_split_one_gate_rows_first() -> None:
    torch.manual_seed(0)
    fused = FusedGatedMLP(4, 6, act="gelu_new", bias=True)
    assert fused.gate_up_proj.weight.shape == (12, 4) and fused.down_proj.bias is not None
    plain = FusedGatedMLP(4, 6)  # bias=False: neither projection has one
    assert plain.gate_up_proj.bias is None and plain.down_proj.bias is None
    x = torch.randn(2, 3, 4)
    weight, bias = fused.gate_up_proj.weight, fused.gate_up_proj.bias
    gate, up = F.linear(x, weight[:6], bias[:6]), F.linear(x, weight[6:], bias[6:])
    hidden = ACTIVATIONS["gelu_new"](gate) * up
    torch.testing.assert_close(fused(x), F.linear(hidden, fused.down_proj.weight, fused.down_proj.bias))


def test_row_linear_keeps_the_bias_on_every_path() -> None:
    torch.manual_seed(0)
    weight, bias = torch.randn(8, 4), torch.randn(8)
    for rows in (1, 3, 9):  # one row, a few rows, and the plain F.linear path
        x = torch.randn(rows, 4)
        torch.testing.assert_close(row_linear(x, weight, bias), F.linear(x, weight, bias))

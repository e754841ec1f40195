"""``microformers_sdk.layers``: behaviour the full mutation run found unasserted (docs/reliability.md,
"Mutation testing"). Activations are checked against the reference's (``transformers.activations``, a test
oracle only); norms and linear products against the formulas they stand for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microformers_sdk import layers
from microformers_sdk.layers import ACTIVATIONS, OffsetRMSNorm, RMSNorm, ScaledEmbedding

X = torch.linspace(-5.0, 5.0, 101)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_every_activation_matches_the_reference(name: str) -> None:
    from transformers.activations import ACT2FN

    torch.testing.assert_close(ACTIVATIONS[name](X), ACT2FN[name](X), atol=1e-6, rtol=1e-6)


def test_norms_print_their_size_and_epsilon() -> None:
    assert repr(RMSNorm(8, eps=1e-5)) == "RMSNorm((8,), eps=1e-05)"
    assert repr(OffsetRMSNorm(6, eps=0.25)) == "OffsetRMSNorm((6,), eps=0.25)"


def test_offset_rms_norm_adds_epsilon_over_the_last_dimension() -> None:
    norm = OffsetRMSNorm(4, eps=0.5)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([0.0, 0.5, -0.5, 1.0]))
    x = torch.arange(24.0).view(2, 3, 4) / 10
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 0.5) * (1 + norm.weight)
    torch.testing.assert_close(norm(x), want)


def test_scaled_embedding_is_unscaled_by_default_and_prints_its_scale() -> None:
    embedding = ScaledEmbedding(10, 4, padding_idx=0)
    ids = torch.tensor([[3, 0, 7]])
    # exact: an embedding lookup copies rows
    assert torch.equal(embedding(ids), embedding.weight[ids])
    assert repr(embedding) == "ScaledEmbedding(10, 4, padding_idx=0, embed_scale=1)"
    assert repr(ScaledEmbedding(10, 4, embed_scale=2.5)) == "ScaledEmbedding(10, 4, embed_scale=2.5)"


def test_scaled_embedding_passes_the_embedding_arguments_on() -> None:
    embedding = ScaledEmbedding(10, 4, padding_idx=2, embed_scale=3.0, dtype=torch.float64)
    assert embedding.weight.shape == (10, 4) and embedding.weight.dtype == torch.float64
    # exact: the padding row is zero-filled
    assert torch.equal(embedding.weight[2], torch.zeros(4, dtype=torch.float64))  # the padding row starts at zero
    ids = torch.tensor([[2, 5]])
    # exact: the same lookup times the same scale
    assert torch.equal(embedding(ids), embedding.weight[ids] * 3.0)


@pytest.mark.parametrize("shape", [(2, 40), (3, 1, 40), (1, 4, 40), (2, 2, 40)])
def test_the_opt_in_few_rows_product_without_the_native_op(
    shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layers, "SMALL_ROWS", 4)  # MICROFORMERS_SMALL_ROWS=4
    monkeypatch.setattr(layers, "few_rows_linear", lambda *_: None)  # as without a compiler
    torch.manual_seed(0)
    weight, bias, x = torch.randn(96, 40), torch.randn(96), torch.randn(*shape)
    with torch.no_grad():
        out = layers.row_linear(x, weight, bias)
    assert out.shape == (*shape[:-1], 96) and out.is_contiguous()
    torch.testing.assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
    trained = layers.row_linear(x, weight.requires_grad_(), bias)  # autograd on: the plain product
    # exact: autograd on: row_linear hands it to F.linear itself
    assert torch.equal(trained, F.linear(x, weight, bias))


def test_rms_norm_of_a_bfloat16_input_with_a_float32_weight() -> None:
    """Mixed precision: the normalised input is cast back to bfloat16, then the float32 weight multiplies it."""
    norm = RMSNorm(8, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 8))
    x = (torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0)) * 3).to(torch.bfloat16)
    out = norm(x)
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16)
    assert out.dtype == torch.float32
    # exact: the mixed-precision path is these very ops on the same shapes
    assert torch.equal(out, norm.weight * normed)


class _GroupedLinear(nn.Linear):
    """A layer type computing several layers of one input in one call (as quantized layers do)."""

    group_calls: ClassVar[list[int]] = []

    @staticmethod
    def linear_group(modules: Sequence[nn.Module], x: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
        if len(modules) < 2:
            return None  # cannot group: the layers are called one by one
        _GroupedLinear.group_calls.append(len(modules))
        weight = torch.cat([m.weight for m in modules])
        return tuple(F.linear(x, weight).split([m.out_features for m in modules], dim=-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_calls = getattr(self, "forward_calls", 0) + 1
        return super().forward(x)


def test_apply_linears_uses_the_first_layer_types_group_call() -> None:
    torch.manual_seed(0)
    q, k = _GroupedLinear(6, 4, bias=False), nn.Linear(6, 2, bias=False)
    x = torch.randn(3, 6)
    _GroupedLinear.group_calls.clear()
    with torch.no_grad():
        outputs = layers.apply_linears((q, k), x)
        single = layers.apply_linears((q,), x)  # the group declines: the layer is called
    assert _GroupedLinear.group_calls == [2] and q.forward_calls == 1
    assert len(outputs) == 2 and outputs[0].shape == (3, 4) and outputs[1].shape == (3, 2)
    torch.testing.assert_close(outputs[0], F.linear(x, q.weight))
    torch.testing.assert_close(outputs[1], F.linear(x, k.weight))
    torch.testing.assert_close(single[0], F.linear(x, q.weight))
    plain = layers.apply_linears((k, q), x)  # the first layer's type decides: no group call
    assert _GroupedLinear.group_calls == [2] and q.forward_calls == 2 and len(plain) == 2

"""The speed paths of the building blocks compute what the plain formulas compute."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microformers_sdk import layers, native
from microformers_sdk.cache import DynamicCache, StaticCache
from microformers_sdk.layers import ACTIVATIONS, FusedGatedMLP, GatedMLP, RMSNorm, apply_linear, gated, row_linear
from microformers_sdk.rotary import apply_rotary_pos_emb, rotate, rotate_half
from microformers_sdk.testing import assert_close


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 40), (1, 40), (40,)])
def test_one_row_linear_matches_f_linear(shape: tuple[int, ...], bias: bool) -> None:
    torch.manual_seed(0)
    weight, x = torch.randn(96, 40), torch.randn(*shape)
    b = torch.randn(96) if bias else None
    with torch.no_grad():
        out = row_linear(x, weight, b)
    expected = F.linear(x, weight, b)
    assert out.shape == expected.shape
    assert_close(out, expected)


def test_row_linear_keeps_f_linear_where_it_does_not_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    weight = torch.randn(96, 40)
    with torch.no_grad():
        rows = torch.randn(layers.FEW_ROWS_MAX + 1, 40)
        monkeypatch.setattr(layers, "many_rows_linear", lambda *_: None)  # as on a CPU without AVX-512
        # exact below: row_linear hands each of these to F.linear itself (same kernel, same shapes)
        assert torch.equal(row_linear(rows, weight), F.linear(rows, weight))  # more rows than the few-row product
        monkeypatch.setattr(layers, "few_rows_linear", lambda *_: None)  # as without a compiler
        rows = torch.randn(8, 40)
        assert torch.equal(row_linear(rows, weight), F.linear(rows, weight))  # more rows than SMALL_ROWS
        odd = torch.randn(95, 40)
        row = torch.randn(1, 40)
        assert torch.equal(row_linear(row, odd), F.linear(row, odd))  # not splittable
        half = weight.to(torch.bfloat16)
        assert torch.equal(row_linear(row.to(torch.bfloat16), half), F.linear(row.to(torch.bfloat16), half))
    row = torch.randn(1, 40, requires_grad=True)
    out = row_linear(row, weight)  # autograd on: the plain product, so training numerics are unchanged
    assert torch.equal(out, F.linear(row, weight))  # exact: F.linear itself
    out.sum().backward()
    assert row.grad is not None


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(2, 40), (3, 1, 40), (1, 4, 40), (2, 2, 40)])
def test_few_rows_linear_matches_f_linear(shape: tuple[int, ...], bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "SMALL_ROWS", 4)
    torch.manual_seed(0)
    weight, x = torch.randn(96, 40), torch.randn(*shape)
    b = torch.randn(96) if bias else None
    with torch.no_grad():
        out = row_linear(x, weight, b)
        transposed = row_linear(x.transpose(0, -2).contiguous().transpose(0, -2), weight, b)  # strided input
    expected = F.linear(x, weight, b)
    assert out.shape == expected.shape and out.is_contiguous()
    assert_close(out, expected)
    assert_close(transposed, expected)


def test_few_rows_product_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "SMALL_ROWS", 1)
    monkeypatch.setattr(layers, "few_rows_linear", lambda *_: None)  # the torch paths, as without a compiler
    weight, rows = torch.randn(96, 40), torch.randn(3, 40)
    with torch.no_grad():
        assert torch.equal(row_linear(rows, weight), F.linear(rows, weight))  # exact: F.linear itself


def test_row_split_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "ROW_SPLIT", 1)
    monkeypatch.setattr(layers, "few_rows_linear", lambda *_: None)  # the torch paths, as without a compiler
    weight, row = torch.randn(96, 40), torch.randn(1, 40)
    with torch.no_grad():
        assert torch.equal(row_linear(row, weight), F.linear(row, weight))  # exact: F.linear itself


def test_apply_linear_respects_hooks_and_subclasses() -> None:
    linear = nn.Linear(8, 6)
    seen: list[torch.Tensor] = []
    linear.register_forward_hook(lambda _m, _i, out: seen.append(out))
    with torch.no_grad():
        apply_linear(linear, torch.randn(1, 8))
    assert len(seen) == 1

    class Scaled(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 2

    scaled = Scaled(8, 6)
    row = torch.randn(1, 8)
    with torch.no_grad():
        assert torch.equal(apply_linear(scaled, row), scaled(row))  # exact: the module's own forward, same input


def test_rms_norm_float32_path_matches_the_formula() -> None:
    torch.manual_seed(0)
    norm = RMSNorm(40, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(40))
        x = torch.randn(2, 3, 40) * 4
        variance = x.pow(2).mean(-1, keepdim=True)
        expected = norm.weight * (x * torch.rsqrt(variance + 1e-5))
        torch.testing.assert_close(norm(x), expected, rtol=1e-6, atol=1e-6)
        # bfloat16 keeps the float32 normalisation and the cast before the weight multiplies
        half = norm.to(torch.bfloat16)
        xb = x.to(torch.bfloat16)
        normed = xb.float() * torch.rsqrt(xb.float().pow(2).mean(-1, keepdim=True) + 1e-5)
        # exact: the bfloat16 path is these very ops on the same shapes
        assert torch.equal(half(xb), half.weight * normed.to(torch.bfloat16))


@pytest.mark.parametrize("make", [DynamicCache, lambda: StaticCache(max_cache_len=10)])
def test_layer_storage_and_advance(make: object) -> None:
    cache = make()
    first = torch.randn(1, 2, 3, 4)
    cache.update(first, first + 1, 0)
    keys, values = cache.layer_storage(0)
    # exact: the cache copies the states it is given (both checks)
    assert keys.shape[2] >= 4 and torch.equal(keys[:, :, :3], first) and torch.equal(values[:, :, :3], first + 1)
    step = torch.randn(1, 2, 1, 4)
    keys[:, :, 3:4] = step  # what a compiled step does, then reports
    cache.advance(1)
    assert cache.get_seq_length() == 4 and torch.equal(cache[0][0][:, :, 3:], step)


@pytest.mark.parametrize("partial", [False, True])
def test_rotary_without_gradients_equals_the_formula_to_the_bit(partial: bool) -> None:
    torch.manual_seed(0)
    # query as projections hand it over: (batch, heads, seq, dim), a transposed view of (batch, seq, heads, dim)
    query, key = torch.randn(2, 7, 4, 16).transpose(1, 2), torch.randn(2, 7, 2, 16).transpose(1, 2)
    dim = 8 if partial else 16
    cos, sin = torch.randn(2, 7, dim), torch.randn(2, 7, dim)

    def formula(x: torch.Tensor) -> torch.Tensor:
        rot = x[..., :dim]
        turned = rot * cos.unsqueeze(1) + rotate_half(rot) * sin.unsqueeze(1)
        return torch.cat((turned, x[..., dim:]), dim=-1)

    with torch.inference_mode():
        q_out, k_out = apply_rotary_pos_emb(query, key, cos, sin)
    # exact: the same products and sums, each rounded once, in the same order (no fused multiply-add)
    assert torch.equal(q_out, formula(query)) and torch.equal(k_out, formula(key))
    leaf = query[..., :dim].clone().requires_grad_(True)
    rotated = rotate(leaf, cos.unsqueeze(1), sin.unsqueeze(1))  # autograd on: the formula itself, differentiable
    rotated.sum().backward()
    assert leaf.grad is not None
    assert torch.equal(rotated.detach(), formula(query)[..., :dim])  # exact: the same ops


@pytest.mark.parametrize("act", ["silu", "gelu_pytorch_tanh", "relu"])
def test_gated_product_without_gradients_is_the_formula_written_in_place(act: str) -> None:
    torch.manual_seed(0)
    gate, up = torch.randn(3, 5, 24), torch.randn(3, 5, 24)
    fn = ACTIVATIONS[act]
    expected = fn(gate) * up
    with torch.no_grad():
        out = gated(fn, gate.clone(), up)
    if act == "silu" and native.native_ops_available():
        assert_close(out, expected, rtol=2e-6, atol=1e-6)  # the native step's SiLU: its own exp (test_native.py)
    else:
        assert torch.equal(out, expected)  # exact: the same two element-wise ops, only written in place
    leaf = gate.clone().requires_grad_(True)
    with_grad = gated(fn, leaf, up)
    with_grad.sum().backward()  # nothing written in place where autograd needs the inputs
    assert torch.equal(leaf.detach(), gate) and leaf.grad is not None
    with torch.no_grad():
        wide = gated(fn, gate[:1].clone(), up)  # a gate that broadcasts against up cannot take the product in place
    assert torch.equal(wide, fn(gate[:1]) * up)  # exact: the formula itself


@pytest.mark.parametrize("fused", [False, True])
def test_gated_mlps_without_gradients_match_the_formula(fused: bool) -> None:
    torch.manual_seed(0)
    mlp = FusedGatedMLP(16, 24) if fused else GatedMLP(16, 24)
    x = torch.randn(2, 9, 16)
    if fused:
        gate, up = F.linear(x, mlp.gate_up_proj.weight).chunk(2, dim=-1)
    else:
        gate, up = F.linear(x, mlp.gate_proj.weight), F.linear(x, mlp.up_proj.weight)
    expected = F.linear(F.silu(gate) * up, mlp.down_proj.weight)
    with torch.inference_mode():
        out = mlp(x)
    assert_close(out, expected)
    assert_close(mlp(x), expected)  # with autograd on

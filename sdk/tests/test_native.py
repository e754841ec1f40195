"""The SDK's native few-row product (``mfsdk::few_rows_linear``, csrc/few_rows.cpp)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from microformers_sdk import layers, native
from microformers_sdk.testing import assert_close, needs_native_ops


@needs_native_ops()
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("out_features,in_features", [(96, 40), (7, 13), (300, 576), (33, 35)])
def test_matches_f_linear_and_each_row_alone(out_features: int, in_features: int, threads: int) -> None:
    """Every row count up to FEW_ROWS_MAX, inner sizes with and without a tail past the 32- and 8-wide chunks;
    a row's output is bit for bit the same alone and in any batch (one summation order per output)."""
    torch.manual_seed(out_features)
    weight, bias = torch.randn(out_features, in_features), torch.randn(out_features)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.randn(native.FEW_ROWS_MAX, in_features)
        alone = torch.cat([native.few_rows_linear(x[i : i + 1], weight, bias) for i in range(len(x))])
        for rows in range(1, native.FEW_ROWS_MAX + 1):
            out = native.few_rows_linear(x[:rows], weight, bias)
            assert out is not None, "CI builds the op (g++ and ninja are installed)"
            # atol 1e-4: sums of up to 576 products of N(0, 1) values (|out| ~ 24) in another order than MKL's
            assert_close(out, F.linear(x[:rows], weight, bias), rtol=1e-5, atol=1e-4)
            # exact: few_rows.cpp sums each output in one fixed order, whatever the rows and threads
            assert torch.equal(out, alone[:rows])
        unbiased = native.few_rows_linear(x[:3], weight, None)
        assert_close(unbiased, F.linear(x[:3], weight), rtol=1e-5, atol=1e-4)
        assert_close(alone[:3] - unbiased, bias.expand(3, -1))
    finally:
        torch.set_num_threads(previous)


def test_row_linear_uses_it_for_few_float_rows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    real = native.few_rows_linear

    def counted(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
        calls.append(tuple(x.shape))
        return real(x, weight, bias)

    monkeypatch.setattr(layers, "few_rows_linear", counted)
    weight = torch.randn(64, 24)
    with torch.no_grad():
        strided = torch.randn(24, 3).t()  # not contiguous: copied first
        assert_close(layers.row_linear(strided, weight), F.linear(strided, weight))
        layers.row_linear(torch.randn(2, 5, 24), weight)
        layers.row_linear(torch.randn(native.FEW_ROWS_MAX + 1, 24), weight)  # a GEMM
        layers.row_linear(torch.randn(2, 24, dtype=torch.float64), weight.double())  # not float32
    layers.row_linear(torch.randn(2, 24), weight.requires_grad_())  # autograd on
    assert calls == [(3, 24), (2, 5, 24)]


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MICROFORMERS_NATIVE", "0")
    monkeypatch.setattr(native, "_built", {})
    assert native.few_rows_linear(torch.randn(1, 8), torch.randn(4, 8), None) is None


def test_empty_sizes_give_f_linear_shapes() -> None:
    with torch.no_grad():
        for x, weight in ((torch.randn(2, 0), torch.randn(3, 0)), (torch.randn(2, 4), torch.randn(0, 4))):
            assert torch.equal(layers.row_linear(x, weight), F.linear(x, weight))  # exact: empty, or sums of nothing (0)

"""``microformers_sdk.layers``: norms, MLP construction, activation lookup and linear products. Activations are
checked against the reference's (``transformers.activations``, a test oracle only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microformers.errors import ConfigError
from microformers_sdk import layers
from microformers_sdk.layers import (
    ACTIVATIONS,
    FusedGatedMLP,
    GatedMLP,
    OffsetRMSNorm,
    RMSNorm,
    ScaledEmbedding,
    apply_linear,
    get_activation,
    row_linear,
)
from microformers_sdk.native import FEW_ROWS_MAX, WIDE_FROM_ROWS, many_rows_linear, wide_products_available
from microformers_sdk.testing import assert_close, needs_native_ops

# From test_layers_rest_mutants.py: ``microformers_sdk.layers``: the norms, MLP construction, activation lookup and
# linear products that the sixth mutation pass judged in full (docs/reliability.md, "Mutation testing"). Norms are
# checked against their formulas; products against ``F.linear`` and, for the native few-row product, against each
# row alone.


def rms_formula(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Llama-family checkpoints were trained: float32 statistics, cast back, then the weight."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


# -- activations by name ------------------------------------------------------------------------------
def test_an_unknown_activation_names_the_setting_and_the_choices() -> None:
    choices = sorted(ACTIVATIONS)
    with pytest.raises(ConfigError) as info:
        get_activation("gelu_exact")
    assert str(info.value) == f"hidden_act='gelu_exact' is not a supported activation; use one of {choices}"
    with pytest.raises(ConfigError) as info:
        get_activation("nope", setting="hidden_activation")
    assert str(info.value).startswith("hidden_activation='nope' is not a supported activation; use one of [")
    with pytest.raises(ConfigError, match=r"^hidden_act=\['silu'\] is not a supported activation"):
        get_activation(["silu"])  # type: ignore[arg-type]  # unhashable: still a ConfigError
    assert get_activation("gelu_new") is ACTIVATIONS["gelu_new"]


# -- RMSNorm ----------------------------------------------------------------------------------------------
def test_rms_norm_starts_at_ones_with_the_llama_epsilon() -> None:
    norm = RMSNorm(6)
    # exact: initialised to the constant one
    assert isinstance(norm.weight, nn.Parameter) and torch.equal(norm.weight, torch.ones(6))
    assert norm.variance_epsilon == 1e-6
    assert [name for name, _ in norm.named_parameters()] == ["weight"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_normalises_each_last_axis_row_with_its_epsilon(dtype: torch.dtype) -> None:
    norm = RMSNorm(8, eps=0.5)  # a large epsilon, so leaving it out or negating it shows
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(-1.5, 2.0, 8))
    norm = norm.to(dtype)
    # rows of very different size along every axis: statistics over the wrong axis differ
    x = (torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8) % 7 - 3) * torch.tensor([[[0.1]], [[4.0]]])
    x = x.to(dtype)
    with torch.no_grad():
        out = norm(x)
    assert out.dtype == dtype and out.shape == (2, 3, 8)
    want = rms_formula(x, norm.weight, 0.5)
    if dtype == torch.float32:  # one fused kernel: the same formula up to rounding
        torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    else:
        assert torch.equal(out, want)  # exact: the half-precision path is the formula's own ops on the same shapes


@needs_native_ops()
def test_rms_norm_takes_the_native_norm_only_on_the_cpu_without_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    real = layers.rms_norm

    def counted(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
        calls.append(tuple(x.shape))
        return real(x, weight, eps)

    monkeypatch.setattr(layers, "rms_norm", counted)
    norm = RMSNorm(8, eps=1e-5)
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        fast = norm(x)
    assert calls == [(2, 3, 8)]
    slow = norm(x)  # gradients: torch's differentiable norm
    assert calls == [(2, 3, 8)] and slow.requires_grad
    assert_close(fast, slow.detach(), rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        traced = torch.jit.trace(norm, x, check_trace=False)  # a trace records torch's ops, which replay on any size
        assert calls == [(2, 3, 8)]
        other = torch.randn(5, 8)
        assert_close(traced(other), norm(other), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("weight_dtype", [torch.bfloat16, torch.float64])
def test_rms_norm_of_a_float32_input_with_another_weight_dtype(weight_dtype: torch.dtype) -> None:
    """The product takes the usual type promotion, as the reference's ``LlamaRMSNorm`` (float64 stays float64)."""
    norm = RMSNorm(8, eps=1e-5).to(weight_dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 8))
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1)) * 3
    with torch.no_grad():
        out = norm(x)
    assert out.dtype == torch.promote_types(weight_dtype, torch.float32)
    assert torch.equal(out, rms_formula(x, norm.weight, 1e-5))  # exact: not the fused path, the formula's own ops


# -- GatedMLP ---------------------------------------------------------------------------------------------
def test_gated_mlp_layers_have_the_checkpoint_shapes_and_biases() -> None:
    plain = GatedMLP(4, 6)
    assert plain.gate_proj.weight.shape == (6, 4) and plain.up_proj.weight.shape == (6, 4)
    assert plain.down_proj.weight.shape == (4, 6)
    assert plain.gate_proj.bias is None and plain.up_proj.bias is None and plain.down_proj.bias is None
    assert plain.act_fn is F.silu
    biased = GatedMLP(4, 6, act="gelu_new", bias=True)
    assert biased.act_fn is ACTIVATIONS["gelu_new"]
    assert biased.gate_proj.bias.shape == (6,) and biased.up_proj.bias.shape == (6,)
    assert biased.down_proj.bias.shape == (4,)
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = biased(x)
        gate, up = F.linear(x, biased.gate_proj.weight, biased.gate_proj.bias), biased.up_proj(x)
        want = F.linear(ACTIVATIONS["gelu_new"](gate) * up, biased.down_proj.weight, biased.down_proj.bias)
    torch.testing.assert_close(out, want)
    with pytest.raises(ConfigError, match="^hidden_act='geluu' is not a supported activation"):
        GatedMLP(4, 6, act="geluu")


# -- apply_linear ---------------------------------------------------------------------------------------
def test_apply_linear_keeps_the_bias_and_honours_pre_hooks() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(8, 6)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(apply_linear(linear, x), F.linear(x, linear.weight, linear.bias))
        torch.testing.assert_close(apply_linear(linear, x[:1]), F.linear(x[:1], linear.weight, linear.bias))
        linear.register_forward_pre_hook(lambda _m, args: (args[0] * 0,))  # an adapter zeroing the input
        assert torch.equal(apply_linear(linear, x), linear.bias.expand(3, 6))  # exact: sums of zeros, plus the bias


@needs_native_ops()
def test_a_gated_mlp_gives_each_row_the_same_in_any_batch() -> None:
    """Its plain ``nn.Linear`` layers go through ``row_linear``: with the native few-row product, a sequence decoded
    in any batch of two or more gives bit-identical rows; alone, the same up to rounding (one row is summed in an
    order of its own, csrc/few_rows.cpp)."""
    torch.manual_seed(0)
    mlp = GatedMLP(40, 96)
    x = torch.randn(5, 40)
    with torch.no_grad():
        paired = torch.cat([mlp(x[[i, (i + 1) % 5]])[:1] for i in range(5)])
        # exact: few_rows.cpp sums each output in one fixed order in any batch of two or more rows
        assert torch.equal(mlp(x), paired)
        assert_close(torch.cat([mlp(x[i : i + 1]) for i in range(5)]), paired)
        gate = torch.cat([apply_linear(mlp.gate_proj, x[[i, 4]])[:1] for i in range(4)])
        assert torch.equal(apply_linear(mlp.gate_proj, x[:4].view(2, 2, 40)), gate.view(2, 2, 96))  # exact: as above


def test_a_gated_mlp_gives_each_row_nearly_the_same_alone_and_in_a_batch_with_torch_products(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the native op (no compiler, another CPU): one row and a batch take different torch products, which
    round differently, so rows agree to float32 tolerance."""
    monkeypatch.setattr(layers, "few_rows_linear", lambda *_: None)
    torch.manual_seed(0)
    mlp = GatedMLP(40, 96)
    x = torch.randn(5, 40)
    with torch.no_grad():
        alone = torch.cat([mlp(x[i : i + 1]) for i in range(5)])
        assert_close(mlp(x), alone)
        gate = torch.cat([apply_linear(mlp.gate_proj, x[i : i + 1]) for i in range(4)])
        assert_close(apply_linear(mlp.gate_proj, x[:4].view(2, 2, 40)), gate.view(2, 2, 96))


# -- row_linear -------------------------------------------------------------------------------------------
@needs_native_ops()
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(96, 40), (7, 13)])
def test_each_row_is_computed_the_same_in_any_batch(shape: tuple[int, int], bias: bool) -> None:
    """With the native few-row product, batch-n decoding gives bit-identical rows for any two to FEW_ROWS_MAX
    float32 rows (where the 16-lane products run, for any two to WIDE_FROM_ROWS - 1 rows, and for any number from
    WIDE_FROM_ROWS on, as in a prompt), and a row alone the same up to rounding (summed in an order of its own)."""
    torch.manual_seed(shape[0])
    weight = torch.randn(*shape)
    b = torch.randn(shape[0]) if bias else None
    x = torch.randn(FEW_ROWS_MAX, shape[1])
    with torch.no_grad():
        paired = torch.cat([row_linear(x[[i, (i + 1) % FEW_ROWS_MAX]], weight, b)[:1] for i in range(FEW_ROWS_MAX)])
        alone = torch.cat([row_linear(x[i : i + 1], weight, b) for i in range(FEW_ROWS_MAX)])
        assert_close(alone, paired, rtol=1e-5, atol=1e-4)
        wide = many_rows_linear(x, weight, b) if wide_products_available() else None
        for rows in range(2, FEW_ROWS_MAX + 1):
            out = row_linear(x[:rows], weight, b)
            # exact: few_rows.cpp sums each output in one fixed order in any batch of two or more rows (of
            # WIDE_FROM_ROWS or more in the 16-lane order, where it runs)
            same = wide if wide is not None and rows >= WIDE_FROM_ROWS else paired
            assert torch.equal(out, same[:rows]), rows
            assert_close(out, F.linear(x[:rows], weight, b), rtol=1e-5, atol=1e-4)  # |out| ~ 6: another order
        batched = row_linear(x[:6].view(2, 3, shape[1]), weight, b)
        assert torch.equal(batched, paired[:6].view(2, 3, shape[0]))  # exact: as above
        single = row_linear(x[0], weight, b)  # one row without a batch axis
        assert single.shape == (shape[0],) and torch.equal(single, alone[0])  # exact: the same one-row call


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(96, 40), (7, 13)])
def test_each_row_is_nearly_the_same_alone_and_in_a_batch_with_torch_products(
    shape: tuple[int, int], bias: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the native op a row alone (the split one-row product) and in a batch (F.linear) round differently."""
    monkeypatch.setattr(layers, "few_rows_linear", lambda *_: None)
    torch.manual_seed(shape[0])
    weight = torch.randn(*shape)
    b = torch.randn(shape[0]) if bias else None
    x = torch.randn(FEW_ROWS_MAX, shape[1])
    with torch.no_grad():
        alone = torch.cat([row_linear(x[i : i + 1], weight, b) for i in range(FEW_ROWS_MAX)])
        for rows in range(1, FEW_ROWS_MAX + 1):
            out = row_linear(x[:rows], weight, b)
            assert_close(out, alone[:rows], rtol=1e-5, atol=1e-4, msg=f"{rows} rows")
            assert_close(out, F.linear(x[:rows], weight, b), rtol=1e-5, atol=1e-4)
        batched = row_linear(x[:6].view(2, 3, shape[1]), weight, b)
        assert_close(batched, alone[:6].view(2, 3, shape[0]), rtol=1e-5, atol=1e-4)
        single = row_linear(x[0], weight, b)  # one row without a batch axis
        assert single.shape == (shape[0],) and torch.equal(single, alone[0])  # exact: the same one-row call


def test_a_strided_bias_gives_the_plain_product() -> None:
    torch.manual_seed(0)
    weight, x = torch.randn(24, 16), torch.randn(3, 16)
    bias = torch.randn(48)[::2]  # not contiguous
    with torch.no_grad():
        torch.testing.assert_close(row_linear(x, weight, bias), F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(row_linear(x[:1], weight, bias), F.linear(x[:1], weight, bias))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(40,), (1, 40), (1, 1, 40)])
def test_one_row_without_the_native_op_keeps_its_shape(
    shape: tuple[int, ...], bias: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layers, "few_rows_linear", lambda *_: None)  # as without a compiler: the row split
    torch.manual_seed(0)
    weight, x = torch.randn(96, 40), torch.randn(*shape)
    b = torch.randn(96) if bias else None
    with torch.no_grad():
        out = row_linear(x, weight, b)
    assert out.shape == (*shape[:-1], 96)
    torch.testing.assert_close(out, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 40), (1, 3, 40)])
def test_the_opt_in_few_rows_product_without_a_bias(shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "SMALL_ROWS", 4)  # MICROFORMERS_SMALL_ROWS=4
    monkeypatch.setattr(layers, "few_rows_linear", lambda *_: None)
    torch.manual_seed(0)
    weight, x = torch.randn(96, 40), torch.randn(*shape)
    with torch.no_grad():
        out = row_linear(x, weight)
    assert out.shape == (*shape[:-1], 96)
    torch.testing.assert_close(out, F.linear(x, weight), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [False, True])
def test_inside_torch_compile_one_row_is_a_multiply_and_sum(bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """While compiling (faked: the eager ops are the ones inductor traces) one row is summed over the weight,
    and more rows are left to ``F.linear``, never the native op."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.manual_seed(0)
    weight = torch.randn(96, 40)
    b = torch.randn(96) if bias else None
    with torch.no_grad():
        for shape in ((40,), (1, 40), (1, 1, 40)):
            x = torch.randn(*shape)
            out = row_linear(x, weight, b)
            want = (x.unsqueeze(-2) * weight).sum(-1)
            assert out.shape == (*shape[:-1], 96)
            assert torch.equal(out, want if b is None else want + b)  # exact: these very ops on the same shapes
        rows = torch.randn(3, 40)
        assert torch.equal(row_linear(rows, weight, b), F.linear(rows, weight, b))  # exact: F.linear itself


# From test_layers_full_mutants.py: ``microformers_sdk.layers``: behaviour the full mutation run found unasserted
# (docs/reliability.md, "Mutation testing"). Activations are checked against the reference's
# (``transformers.activations``, a test oracle only); norms and linear products against the formulas they stand for.


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


# From test_layers_mutants.py: Behaviour of ``microformers_sdk.layers`` that the mutation pass found unasserted
# (docs/reliability.md). Activations are checked against the reference's (``transformers.activations``, a test
# oracle only); the MLPs and ``row_linear`` against the plain products they stand for.


X_NARROW = torch.linspace(-4.0, 4.0, 41)  # includes 0


@pytest.mark.parametrize("name", ["gelu_new", "gelu_fast", "quick_gelu"])
def test_gelu_variants_match_the_reference(name: str) -> None:
    from transformers.activations import ACT2FN

    torch.testing.assert_close(ACTIVATIONS[name](X_NARROW), ACT2FN[name](X_NARROW), atol=1e-6, rtol=1e-6)


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

"""The 8-row interleaved layout of layers with integer activations: the kernels that read it, and that nothing
else sees it (state_dict, saving, embedding lookups and de-quantisation give the plain layout)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from microformers import AutoModelForCausalLM, Int4Config, Int8Config
from microformers_quant import kernels
from microformers_quant.modules import QuantLinear
from microformers_sdk.testing import assert_close

from .markers import needs_quant_kernels

IDS = torch.tensor([[1, 5, 9, 33, 40, 7, 60, 11]])


def quantized_layer(bits: int, group: int, rows: int = 40, cols: int = 128) -> QuantLinear:
    torch.manual_seed(bits * group + rows)
    layer = QuantLinear(cols, rows, bias=False, bits=bits, group=group)
    for name, tensor in layer.quantize_weight(torch.randn(rows, cols)).items():
        setattr(layer, name, tensor)
    return layer


@pytest.mark.parametrize("bits", [4, 8])
def test_interleaving_permutes_the_plain_layout(bits: int) -> None:
    layer = quantized_layer(bits, 32)
    plain = layer._parts()
    mixed = kernels.interleave_rows(*plain)
    # exact: a permutation of bytes and back
    assert all(torch.equal(a, b) for a, b in zip(kernels.plain_rows(*mixed), plain, strict=True))
    assert [t.shape for t in mixed] == [t.shape for t in plain]
    # row 8i + r, 4-byte chunk c lies at byte ((i * chunks + c) * 8 + r) * 4
    chunks = plain[0].shape[1] // 4
    flat = mixed[0].view(-1)
    for row, chunk in ((0, 0), (13, 2), (39, chunks - 1)):
        start = ((row // 8 * chunks + chunk) * 8 + row % 8) * 4
        assert torch.equal(flat[start : start + 4], plain[0][row, 4 * chunk : 4 * chunk + 4])
    groups = plain[1].shape[1]
    assert mixed[1].view(-1)[(13 // 8 * groups + 1) * 8 + 13 % 8] == plain[1][13, 1]


@needs_quant_kernels
@pytest.mark.parametrize("bits,group", [(4, 32), (4, 64), (8, 32), (8, 128)])
@pytest.mark.parametrize("act_bits,drift", [(8, 0.05), (16, 2e-4)])
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_interleaved_kernels_match_their_torch_definition(
    bits: int, group: int, act_bits: int, drift: float, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    layer = quantized_layer(bits, group)
    layer.activation_bits = act_bits
    plain = layer.dequantize()
    assert layer.interleave() and layer.interleaved
    assert torch.equal(layer.dequantize(), plain)  # exact: the same blocks, read through the permutation
    x = torch.randn(rows, 128)
    q = kernels.quantize_activations_planes(x, 1 if act_bits == 8 else 2)
    if bits == 4:
        low = layer.plain_buffers()["mins"].float().repeat_interleave(group, dim=1)
        expected = torch.nn.functional.linear(q, plain - low) + torch.nn.functional.linear(x, low)
    else:
        expected = torch.nn.functional.linear(q, plain)
    got = layer(x)  # every row quantized, prefill-sized inputs too
    assert_close(got, expected, atol=2e-4, rtol=1e-4)
    exact = torch.nn.functional.linear(x, plain)
    assert 0 < (got - exact).abs().max() < drift * exact.abs().max()
    # a row's result does not depend on the rows beside it (other row blocks of the kernel)
    assert_close(layer(x[-1:]), got[-1:])
    # where no kernel runs (a tensor on another device), the torch path computes the same from the plain layout
    monkeypatch.setattr(kernels, "_native", lambda *_: None)
    assert_close(layer(x), got, atol=2e-4, rtol=1e-4)


def test_two_planes_hold_int16_precision() -> None:
    torch.manual_seed(1)
    x = torch.randn(4, 256) * torch.logspace(-3, 2, 256)
    step = x.view(4, -1, 32).abs().amax(-1, keepdim=True) / 127 / 254
    error = (kernels.quantize_activations_planes(x, 2) - x).view(4, -1, 32).abs()
    assert (error <= step / 2 * 1.001 + 1e-12).all()
    assert (kernels.quantize_activations_planes(x, 1) - x).abs().max() > 100 * error.max()


@needs_quant_kernels
@pytest.mark.parametrize("config", [Int4Config(group_size=32, activations="int16"), Int8Config(activations="int8")])
def test_the_layout_stays_inside_the_model(tiny_llama: Path, tmp_path: Path, config: object) -> None:
    float_activations = type(config).from_dict({**config.to_dict(), "activations": "float32"})  # type: ignore[attr-defined]
    plain = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=float_activations)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=config)
    layers = [m for m in model.modules() if hasattr(m, "interleaved")]
    assert layers and all(m.interleaved for m in layers)  # every tiny layer has a multiple of 8 outputs
    assert not any(m.interleaved for m in plain.modules() if hasattr(m, "interleaved"))
    # exact: the saved tensors are the plain layout's bytes, permuted back
    ours, theirs = model.state_dict(), plain.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    # exact: the same rows de-quantised with the same operations
    assert torch.equal(model.model.embed_tokens(IDS), plain.model.embed_tokens(IDS))
    assert torch.equal(model.model.embed_tokens(IDS[:, 3:4]), plain.model.embed_tokens(IDS[:, 3:4]))
    with torch.no_grad():
        logits = model(IDS).logits
        assert_close(logits, plain(IDS).logits, atol=0.05 if config.activations == "int8" else 2e-3, rtol=0)  # type: ignore[attr-defined]
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert reloaded.model.layers[0].mlp.up_proj.interleaved
    with torch.no_grad():
        assert torch.equal(reloaded(IDS).logits, logits)  # exact: the same bytes through the same kernels
    # loading a state dict brings the plain layout back, and the layer reads it as such; a partial load too
    partial = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=config)
    partial.load_state_dict({k: v for k, v in theirs.items() if k.endswith(".scales")}, strict=False)
    assert not partial.model.layers[0].mlp.up_proj.interleaved
    with torch.no_grad():
        assert_close(partial(IDS).logits, plain(IDS).logits)
    model.load_state_dict(theirs)
    assert not model.model.layers[0].mlp.up_proj.interleaved
    with torch.no_grad():
        assert_close(model(IDS).logits, plain(IDS).logits)

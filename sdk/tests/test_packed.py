"""pack_linear_weights: float32 linear layers in oneDNN's packed layout, inference only."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microformers.errors import InputError
from microformers_sdk import PackedLinear, pack_linear_weights
from microformers_sdk.packed import refuse_packed
from microformers_sdk.testing import (
    needs_native_ops,  # noqa: F401  (an autouse fixture, found by name)
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.up = nn.Linear(32, 48)
        self.down = nn.Linear(48, 32, bias=False)
        self.head = nn.Linear(32, 50, bias=False)
        self.head.weight = self.embed.weight  # tied: packing would keep a second copy

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.down(torch.relu(self.up(self.embed(ids)))))


def test_packed_layers_compute_what_the_float_layers_compute() -> None:
    torch.manual_seed(0)
    model = Tiny()
    ids = torch.randint(0, 50, (3, 7))
    with torch.no_grad():
        expected = {rows: model(ids[:, :rows]) for rows in (1, 7)}
    hooked = nn.Linear(8, 8)
    hooked.register_forward_hook(lambda *_: None)
    model.extra = hooked
    up_weight = model.up.weight
    assert pack_linear_weights(model) == 2  # up and down; the tied head and the hooked layer stay
    assert type(model.up) is PackedLinear and type(model.down) is PackedLinear
    assert type(model.head) is nn.Linear and type(model.extra) is nn.Linear
    assert "weight" not in dict(model.up.named_parameters()) and model.up.bias is not None
    assert model.head.weight is model.embed.weight  # the rest is copied out of any memory map, ties kept
    with torch.no_grad():
        for rows, logits in expected.items():
            assert torch.allclose(model(ids[:, :rows]), logits, atol=1e-5, rtol=1e-5), rows
        x = torch.randn(40, 32)
        assert torch.allclose(model.up(x), nn.functional.linear(x, up_weight, model.up.bias), atol=1e-5)


def test_packed_layers_refuse_training_saving_and_conversion() -> None:
    model = Tiny()
    pack_linear_weights(model)
    with pytest.raises(InputError, match=r"'up'.*packed for inference.*load the model again"):
        model.state_dict()
    with pytest.raises(InputError, match=r"'up'.*no gradient"):
        model.up(torch.randn(2, 32, requires_grad=True))
    with pytest.raises(InputError, match=r"'down'.*float32 inputs"):
        model.down(torch.randn(2, 48, dtype=torch.float64))
    with pytest.raises(InputError, match=r"packed for float32.*torch.float16"):
        model.half()
    with pytest.raises(InputError, match=r"'layer'.*float32 weights"):
        PackedLinear(nn.Linear(4, 4).double(), "layer")
    mixed = Tiny()
    mixed.down.double()
    with pytest.raises(InputError, match=r"'down' is torch.float64.*float32 weights"):
        pack_linear_weights(mixed)
    assert type(mixed.up) is nn.Linear  # nothing was swapped


# From test_outputs_native_packed_full_mutants.py: ``microformers_sdk.native`` and ``microformers_sdk.packed``
# behaviour the full mutation run found unasserted. (docs/reliability.md, issue #19; ``microformers_sdk.outputs``
# has no code for mutmut to mutate.)


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


class _Nested(nn.Module):
    """Linear layers below the top level, one of them behind a forward pre-hook (left unpacked)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 6, bias=False))])
        self.head = nn.Linear(6, 3)
        self.head.register_forward_pre_hook(lambda *_: None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks[0](x))


@needs_onednn
def test_nested_layers_are_packed_in_place_and_compute_the_same() -> None:
    torch.manual_seed(0)
    model = _Nested()
    x = torch.randn(5, 6)
    with torch.no_grad():
        expected = model(x)
    assert pack_linear_weights(model) == 2
    first, second = model.blocks[0][0], model.blocks[0][2]
    assert type(first) is PackedLinear and type(second) is PackedLinear and type(model.head) is nn.Linear
    assert (first.name, second.name) == ("blocks.0.0", "blocks.0.2")
    assert set(dict(model.named_children())) == {"blocks", "head"}  # nothing added at the top level
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)
    assert "packed for 8 rows" in repr(first) and "in_features=6, out_features=8" in repr(first)


@needs_onednn
def test_gradient_refusal_depends_on_what_needs_a_gradient() -> None:
    torch.manual_seed(0)
    plain = nn.Linear(6, 4, bias=False)
    unbiased = PackedLinear(plain, "unbiased")
    x = torch.randn(3, 6)
    torch.testing.assert_close(unbiased(x), F.linear(x, plain.weight.detach()), rtol=1e-5, atol=1e-5)  # grad on
    with pytest.raises(InputError, match=r"'unbiased' was packed for inference"):
        unbiased(x.clone().requires_grad_())
    biased_linear = nn.Linear(6, 4)
    biased = PackedLinear(biased_linear, "biased")
    message = (
        "layer 'biased' was packed for inference (pack_linear_weights) and has no gradient; load the "
        "model again to train it, or run under torch.no_grad()"
    )
    with pytest.raises(InputError, match=re.escape(message)):
        biased(x)  # a trainable bias would need one
    with torch.no_grad():
        expected = F.linear(x, biased_linear.weight, biased_linear.bias)
        torch.testing.assert_close(biased(x), expected, rtol=1e-5, atol=1e-5)
    biased.bias.requires_grad_(False)
    torch.testing.assert_close(biased(x), expected, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_refusal_messages_name_the_layer_and_the_way_out() -> None:
    layer = PackedLinear(nn.Linear(4, 4), "proj_X")
    with torch.no_grad(), pytest.raises(InputError) as wrong_dtype:
        layer(torch.randn(2, 4, dtype=torch.float64))
    assert str(wrong_dtype.value) == "layer 'proj_X' is packed for float32 inputs, got torch.float64"
    model = nn.Module()
    model.proj_X = layer
    with pytest.raises(InputError) as saved:
        model.state_dict()
    assert str(saved.value) == (
        "layer 'proj_X' was packed for inference (pack_linear_weights): its weight is in oneDNN's layout and "
        "cannot be saved or read back; load the model again to save or train it"
    )
    with pytest.raises(InputError) as converted:
        model.to(torch.bfloat16)
    assert str(converted.value) == (
        "layer 'proj_X' was packed for float32 on the CPU (pack_linear_weights); load the model again with the "
        "dtype and device you need instead of converting it to torch.bfloat16 on cpu"
    )
    with torch.no_grad(), pytest.raises(InputError, match=r"^layer '' is packed for float32 inputs"):
        PackedLinear(nn.Linear(4, 4))(torch.randn(1, 4).half())  # built by hand without a name: an empty one
    with pytest.raises(InputError) as unpackable:
        PackedLinear(nn.Linear(4, 4).to(torch.float16), "half")
    assert str(unpackable.value) == (
        "pack_linear_weights: layer 'half' is torch.float16 on cpu; packing needs float32 weights on the CPU "
        "(load with dtype=torch.float32)"
    )


@needs_onednn
def test_float32_cpu_conversions_of_a_packed_model_are_allowed() -> None:
    torch.manual_seed(0)
    model = _Nested()
    x = torch.randn(2, 6)
    pack_linear_weights(model)
    with torch.no_grad():
        expected = model(x)
        assert model.float() is model and model.to("cpu") is model and model.to(torch.float32) is model
        torch.testing.assert_close(model(x), expected)
    assert model.blocks[0][0].bias.dtype == torch.float32


def test_without_onednn_packing_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    model = _Nested()
    with pytest.raises(InputError) as refused:
        pack_linear_weights(model)
    assert str(refused.value) == (
        "pack_linear_weights needs PyTorch built with oneDNN (mkldnn), which this build lacks"
    )
    assert type(model.head) is nn.Linear


@needs_onednn
def test_refuse_packed_names_the_action_the_count_and_the_first_layer() -> None:
    model = _Nested()
    refuse_packed(model, "compile_decode_step")  # nothing packed: nothing refused
    pack_linear_weights(model)
    with pytest.raises(InputError) as refused:
        refuse_packed(model, "compile_decode_step")
    assert str(refused.value) == (
        "compile_decode_step: 2 layers (first 'blocks.0.0') were packed for eager inference by "
        "pack_linear_weights, which torch.compile cannot lower; decode eagerly, or load the model again "
        "without packing to compile it"
    )

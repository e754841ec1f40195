"""pack_linear_weights: float32 linear layers in oneDNN's packed layout, inference only."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from microformers.errors import InputError
from microformers_sdk import PackedLinear, pack_linear_weights
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)

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

"""``microformers_sdk.decode_steps`` on its own: which runner ``compile_decode_step`` installs, what each runs
(the decoders' tests compare whole generations through them)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from microformers.errors import InputError
from microformers_sdk.cache import StaticCache
from microformers_sdk.decode_steps import (
    DecodeStepLayout,
    LayerInputs,
    NativeDecodeStep,
    RegionalDecodeStep,
    compile_decode_step,
    static_layer_step,
    uncompile_decode_step,
)
from microformers_sdk.static_steps import DecoderLayerParts, DecoderStepShape

SHAPE = DecoderStepShape(heads=2, kv_heads=1, head_dim=4, scaling=0.5)


class _Attention(nn.Module):
    sliding_window = None


class _Layer(nn.Module):
    """Follows the calling convention: a static step adds its layer index and records the storage it got."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.layer_idx, self.self_attn = index, _Attention()
        self.seen: list[Any] = []

    def forward(self, hidden, rotary, mask, is_causal, cache, attention_fn, output_attentions, cache_position) -> Any:  # type: ignore[no-untyped-def]
        self.seen.append((cache.layer_storage(self.layer_idx), mask, cache_position, attention_fn))
        return hidden + self.layer_idx + 1, None


class _NativeLinear(nn.Linear):
    with_head = True
    steps: list[Any] = []

    @staticmethod
    def native_decoder_step(layers: Any, shape: Any, final_norm: Any, lm_head: Any) -> Any:
        if lm_head is not None and not _NativeLinear.with_head:
            return None

        def step(hidden, cos, sin, visible, storages, position):  # type: ignore[no-untyped-def]
            _NativeLinear.steps.append((len(storages), position, lm_head is not None))
            return hidden * 10

        return step


def _parts(linear: type[nn.Linear]) -> DecoderLayerParts:
    return DecoderLayerParts(*(linear(2, 2) if i not in (0, 5) else nn.Identity() for i in range(9)))


class _Model(nn.Module):
    def __init__(self, linear: type[nn.Linear] | None = None, layers: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Layer(i) for i in range(layers))
        self.norm, self.lm_head = nn.Identity(), nn.Identity()
        self.parts = [None if linear is None else _parts(linear) for _ in range(layers)]
        self.logits_calls = 0

    def logits(self, inputs_embeds, layer_inputs, cache, output_attentions=False, output_hidden_states=False, keep=0):  # type: ignore[no-untyped-def]
        self.logits_calls += 1
        return inputs_embeds - 1, None, None

    def decode_step_layout(self) -> DecodeStepLayout:
        return DecodeStepLayout(self.layers, self.norm, self.lm_head, SHAPE, self.parts)


def _step_inputs(head_dim: int = 4, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, LayerInputs, Any]:
    cache = StaticCache(max_cache_len=6)
    for layer in range(2):
        cache.update(torch.zeros(1, 1, 3, 4, dtype=dtype), torch.zeros(1, 1, 3, 4, dtype=dtype), layer)
    rotary = (torch.ones(1, 1, head_dim), torch.zeros(1, 1, head_dim))
    visible = torch.ones(1, 1, 1, 6, dtype=torch.bool)
    inputs = LayerInputs(rotary, {None: (visible, False)}, torch.tensor([3]), "attention")
    return torch.ones(1, 1, 2, dtype=dtype), inputs, cache


def test_static_layer_step_runs_the_layer_forward_with_its_storage_passed_in() -> None:
    layer, key, value = _Layer(5), torch.zeros(1), torch.ones(1)
    position = torch.tensor([3])
    out = static_layer_step(layer, torch.zeros(1), "rotary", "visible", key, value, position, "attention")  # type: ignore[arg-type]
    assert out.tolist() == [6.0]
    (storage, mask, cache_position, attention_fn), *_ = layer.seen
    assert storage == (key, value) and mask == "visible" and cache_position is position and attention_fn == "attention"


def test_regional_step_runs_every_layer_then_the_final_norm_and_head() -> None:
    model = _Model()
    model.lm_head = nn.Linear(2, 3)
    step = RegionalDecodeStep(model, model.decode_step_layout())
    hidden, inputs, cache = _step_inputs()
    logits, hidden_states, attentions = step(hidden, inputs, cache)
    expected = model.lm_head(torch.full((1, 1, 2), 1.0 + 1 + 2))
    torch.testing.assert_close(logits, expected)
    assert hidden_states is None and attentions is None and model.logits_calls == 0
    for index, layer in enumerate(model.layers):
        (storage, _, position, attention_fn), *_ = layer.seen
        assert storage == cache.layer_storage(index) and position is inputs.cache_position
        assert attention_fn == "attention"


def test_compile_decode_step_installs_the_native_step_where_the_layers_offer_one() -> None:
    model = _Model(_NativeLinear)
    compile_decode_step(model)
    step = model.__dict__["_compiled_decode_step"]
    assert isinstance(step, NativeDecodeStep) and step.includes_head
    assert model.__dict__["_compiled_decode_options"] == {"native": True}
    _NativeLinear.steps.clear()
    hidden, inputs, cache = _step_inputs()
    logits, *_ = step(hidden, inputs, cache)
    assert logits.tolist() == [[[10.0, 10.0]]] and _NativeLinear.steps == [(2, 3, True)]
    # a partial rotary or another dtype: the model's ordinary logits instead
    step(*_step_inputs(head_dim=2))
    step(*_step_inputs(dtype=torch.float64))
    assert model.logits_calls == 2 and len(_NativeLinear.steps) == 1
    uncompile_decode_step(model)
    assert "_compiled_decode_step" not in model.__dict__ and "_compiled_decode_options" not in model.__dict__


def test_a_native_step_without_the_head_runs_the_final_norm_and_head_eagerly() -> None:
    model = _Model(_NativeLinear)
    model.lm_head = nn.Linear(2, 3)
    _NativeLinear.with_head = False
    try:
        compile_decode_step(model, native=True)
    finally:
        _NativeLinear.with_head = True
    step = model.__dict__["_compiled_decode_step"]
    assert not step.includes_head
    hidden, inputs, cache = _step_inputs()
    torch.testing.assert_close(step(hidden, inputs, cache)[0], model.lm_head(hidden * 10))


@pytest.mark.parametrize("linear", [None, nn.Linear])
def test_native_true_needs_every_layer_described_with_native_linears(linear: Any) -> None:
    model = _Model(linear)
    with pytest.raises(InputError, match="no native decode step"):
        compile_decode_step(model, native=True)
    half = _Model(_NativeLinear)
    half.parts[1] = None  # one layer that cannot be described
    with pytest.raises(InputError, match="no native decode step"):
        compile_decode_step(half, native=True)
    with pytest.raises(InputError, match="compiles nothing"):
        compile_decode_step(_Model(_NativeLinear), native=True, regional=True)


def test_compiled_steps_are_kept_for_the_same_options() -> None:
    model = _Model(_NativeLinear)
    compile_decode_step(model, native=False)  # never native: torch.compile of logits (compiles on first call)
    first = model.__dict__["_compiled_decode_step"]
    assert not isinstance(first, NativeDecodeStep)
    assert model.__dict__["_compiled_decode_options"] == {"dynamic": False, "fullgraph": True, "regional": False}
    compile_decode_step(model, native=False)
    assert model.__dict__["_compiled_decode_step"] is first
    compile_decode_step(model, regional=True)
    assert isinstance(model.__dict__["_compiled_decode_step"], RegionalDecodeStep)
    assert model.__dict__["_compiled_decode_options"]["regional"] is True


def test_layer_inputs_count_a_static_steps_positions() -> None:
    cache = StaticCache(max_cache_len=6)
    cache.update(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4), 0)
    LayerInputs((torch.ones(1), torch.ones(1)), {}, None, None).advance(cache, 1)
    assert cache.get_seq_length() == 3
    LayerInputs((torch.ones(1), torch.ones(1)), {}, torch.tensor([3]), None).advance(cache, 1)
    assert cache.get_seq_length() == 4
    LayerInputs((torch.ones(1), torch.ones(1)), {}, None, None).advance(None, 1)  # no cache, nothing to count

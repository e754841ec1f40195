"""One runner for a decoder's static decode steps: compiled whole, compiled layer by layer, or native.

A *static step* (:mod:`microformers_sdk.static_steps`) feeds one token per row into a prefilled
``StaticCache``; every step has the same shapes. :func:`compile_decode_step` makes a causal LM run
those steps another way than eagerly, from nothing but the model's ordinary forward and a
declarative :class:`DecodeStepLayout` of its decoder:

* whole (the default): ``torch.compile`` of ``model.logits``, the decoder and head every forward runs;
* regional (``regional=True``): :func:`static_layer_step` compiled once and shared by every layer, the
  final norm and head eager. The layer step *is* the layer's own forward, called with the layer's
  cache storage passed in (so nothing layer-specific but its parameters reaches the compiled graph);
* native: where the layout describes every layer as :class:`~microformers_sdk.static_steps.DecoderLayerParts`
  and the type of its linear layers provides a whole-decoder step
  (:func:`~microformers_sdk.static_steps.native_decoder_step`; quantized layers of ``microformers-quant``
  do, and plain float32 ``nn.Linear`` layers have the SDK's own), one native call for all layers (and the
  final norm and head where it covers them).

``generate`` needs no call for the native one: :func:`default_decode_step` finds the native step of a
model that has one (microformers-generation asks for it on every call where it applies), and
:func:`decoding_with` installs it for the duration of that call only, so a model changed between calls
(modules replaced, hooks added, moved to another device) is looked at afresh each time.

What a model provides (:class:`StaticStepModel`): ``logits(inputs_embeds, layer_inputs, cache,
output_attentions, output_hidden_states, logits_to_keep)`` returning ``(logits, hidden_states,
attentions)``, ``decode_step_layout()``, and decoder layers called as
``layer(hidden_states, rotary, attention_mask, is_causal, past_key_values, attention_fn,
output_attentions, cache_position)`` that take a static step when ``cache_position`` is given (write
the new key/value into ``past_key_values.layer_storage(layer_idx)`` at ``cache_position``, attend over
the whole storage with ``attention_mask`` selecting the visible positions). Its forward prepares a
:class:`LayerInputs` and, on a static step without labels or extra outputs, calls the runner
:func:`compile_decode_step` stored (``model.__dict__["_compiled_decode_step"]``) instead of ``logits``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import attrs
import torch
from torch import nn

from microformers.errors import InputError

from .cache import Cache, StaticCache
from .layers import apply_linear
from .packed import PackedLinear, refuse_packed
from .static_steps import DecoderLayerParts, DecoderStepShape, NativeDecoderStep, native_decoder_step

__all__ = [
    "DecodeStepLayout",
    "LayerInputs",
    "NativeDecodeStep",
    "RegionalDecodeStep",
    "StaticStepModel",
    "StaticStepRunner",
    "compile_decode_step",
    "decoding_with",
    "default_decode_step",
    "static_layer_step",
    "uncompile_decode_step",
]

StepOutput = tuple[torch.Tensor, "tuple[torch.Tensor, ...] | None", "tuple[torch.Tensor, ...] | None"]


@attrs.define  # not frozen: torch.compile cannot trace a frozen class's __init__ (object.__setattr__)
class LayerInputs:
    """What every layer of one forward pass shares: rotary ``(cos, sin)``, ``(mask, is_causal)`` by sliding
    window, ``cache_position`` (a one-element tensor) on a static step, and the attention function."""

    rotary: tuple[torch.Tensor, torch.Tensor]
    masks: dict[int | None, tuple[torch.Tensor | None, bool]]
    cache_position: torch.Tensor | None
    attention_fn: Any

    def advance(self, cache: Cache | None, count: int) -> None:
        """A static step wrote into the storage directly: count the new positions as filled."""
        if self.cache_position is not None:
            cache.advance(count)


@attrs.frozen
class DecodeStepLayout:
    """A decoder as its static step runs: ``layers`` in order, then ``final_norm`` and ``lm_head``.

    ``native_parts`` describes each layer for a native step (None for a layer that cannot be
    described: then there is no native step); ``shape`` is the attention geometry all layers share.
    """

    layers: Sequence[nn.Module]
    final_norm: nn.Module
    lm_head: nn.Module
    shape: DecoderStepShape
    native_parts: Sequence[DecoderLayerParts | None] = ()


class StaticStepModel(Protocol):
    """What :func:`compile_decode_step` calls on a causal LM."""

    def logits(
        self,
        inputs_embeds: torch.Tensor,
        layer_inputs: LayerInputs,
        past_key_values: Cache | None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        logits_to_keep: int | torch.Tensor = 0,
    ) -> StepOutput: ...

    def decode_step_layout(self) -> DecodeStepLayout: ...


class _LayerStorage:
    """The cache as one layer's static step sees it: its own storage, whatever layer index asks for it."""

    __slots__ = ("storage",)

    def __init__(self, key_storage: torch.Tensor, value_storage: torch.Tensor) -> None:
        self.storage = (key_storage, value_storage)

    def layer_storage(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.storage


def static_layer_step(
    layer: nn.Module,
    hidden_states: torch.Tensor,
    rotary: tuple[torch.Tensor, torch.Tensor],
    visible: torch.Tensor,
    key_storage: torch.Tensor,
    value_storage: torch.Tensor,
    cache_position: torch.Tensor,
    attention_fn: Any = None,
) -> torch.Tensor:
    """One decoder layer's static step: the layer's own forward, its cache storage passed in.

    The layer reads nothing layer-specific but its parameters (its layer index only picks the storage,
    which is passed in), so regional compilation compiles this function once for every layer of a type.
    """
    storage = _LayerStorage(key_storage, value_storage)
    hidden_states, _ = layer(hidden_states, rotary, visible, False, storage, attention_fn, False, cache_position)
    return hidden_states


class StaticStepRunner:
    """A static step whose decoder layers run another way (:meth:`layers`), then the eager final norm and head.

    :meth:`layers` returning None runs the model's ordinary ``logits`` instead.
    """

    # True where :meth:`layers` returns the logits (the final norm and head included) instead of hidden states
    includes_head = False

    def __init__(self, model: StaticStepModel, layout: DecodeStepLayout) -> None:
        self.model, self.layout = model, layout

    def layers(self, inputs_embeds: torch.Tensor, layer_inputs: LayerInputs, cache: Cache) -> torch.Tensor | None:
        raise NotImplementedError

    def __call__(
        self,
        inputs_embeds: torch.Tensor,
        layer_inputs: LayerInputs,
        past_key_values: Cache,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        logits_to_keep: int | torch.Tensor = 0,
    ) -> StepOutput:
        hidden_states = self.layers(inputs_embeds, layer_inputs, past_key_values)
        if hidden_states is None:
            return self.model.logits(
                inputs_embeds, layer_inputs, past_key_values, output_attentions, output_hidden_states, logits_to_keep
            )
        if self.includes_head:
            return hidden_states, None, None
        hidden_states = self.layout.final_norm(hidden_states)  # one position: logits_to_keep changes nothing
        return apply_linear(self.layout.lm_head, hidden_states), None, None


class RegionalDecodeStep(StaticStepRunner):
    """The static step with one layer function (:func:`static_layer_step`, compiled) shared by every layer."""

    def __init__(self, model: StaticStepModel, layout: DecodeStepLayout, layer_step: Any = static_layer_step) -> None:
        super().__init__(model, layout)
        self.layer_step = layer_step

    def layers(self, inputs_embeds: torch.Tensor, layer_inputs: LayerInputs, cache: Cache) -> torch.Tensor:
        hidden_states = inputs_embeds
        for index, layer in enumerate(self.layout.layers):
            visible = layer_inputs.masks[layer.self_attn.sliding_window][0]
            key_storage, value_storage = cache.layer_storage(index)
            hidden_states = self.layer_step(
                layer, hidden_states, layer_inputs.rotary, visible, key_storage, value_storage,
                layer_inputs.cache_position, layer_inputs.attention_fn,
            )  # fmt: skip
        return hidden_states


class NativeDecodeStep(StaticStepRunner):
    """The static step through a native implementation of all decoder layers, and of the final norm and
    head where the implementation covers them too (otherwise those run eagerly)."""

    def __init__(
        self, model: StaticStepModel, layout: DecodeStepLayout, layers_step: NativeDecoderStep, includes_head: bool
    ) -> None:
        super().__init__(model, layout)
        self.layers_step = layers_step
        self.includes_head = includes_head

    @classmethod
    def build(
        cls, model: StaticStepModel, layout: DecodeStepLayout, float_layers: bool = True
    ) -> NativeDecodeStep | None:
        """None unless every layer is described and the type of its linear layers offers a native step.

        ``float_layers=False``: None for plain float ``nn.Linear`` layers too (only a type's own step, such as
        quantized layers'). The SDK's float step (:class:`~microformers_sdk.static_steps.FloatDecoderStep`)
        is built only where no forward hook is registered on any module of the layers or globally (its
        parts say nothing of the modules around them)."""
        parts = list(layout.native_parts)
        if not parts or len(parts) != len(layout.layers) or any(part is None for part in parts):
            return None
        if type(parts[0].q_proj) is nn.Linear and not (float_layers and _no_hooks(layout.layers)):
            return None
        step = native_decoder_step(parts, layout.shape, layout.final_norm, layout.lm_head)
        if step is not None:
            return cls(model, layout, step, includes_head=True)
        step = native_decoder_step(parts, layout.shape)
        return None if step is None else cls(model, layout, step, includes_head=False)

    def layers(self, inputs_embeds: torch.Tensor, layer_inputs: LayerInputs, cache: Cache) -> torch.Tensor | None:
        cos, sin = layer_inputs.rotary
        storages = [cache.layer_storage(index) for index in range(len(self.layout.layers))]
        if (
            cos.shape[-1] != self.layout.shape.head_dim  # partial rotary
            or inputs_embeds.dtype != torch.float32
            or storages[0][0].dtype != torch.float32
        ):
            return None
        visible = next(iter(layer_inputs.masks.values()))[0]
        return self.layers_step(inputs_embeds, cos, sin, visible, storages, int(layer_inputs.cache_position[0]))

    def prompt(
        self,
        inputs_embeds: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        cache: Cache | None,
        past_length: int,
        attention_mask: torch.Tensor | None,
        windows: Sequence[int | None],
    ) -> torch.Tensor | None:
        """The next-token logits ``(1, 1, vocab)`` after a one-row prompt of several tokens run through the native
        step into ``cache`` (keys and values written from ``past_length`` on, the cache advanced past them), or
        None where the ordinary forward runs it instead: a batch or a single token, gradients on, a cache other than
        a :class:`StaticCache` with room for the prompt, padding, a sliding window shorter than the cache, partial
        rotary or non-float32 inputs, a step that takes no prompt of this length (the float step: at most
        :data:`~microformers_sdk.native.FEW_ROWS_MAX` tokens).

        Each token attends causally to the ones before it, as the ordinary forward's; the layers compute every
        token (their keys and values are cached) and the head only the last.
        """
        batch, rows, width = inputs_embeds.shape
        if batch != 1 or rows < 2 or torch.is_grad_enabled() or not isinstance(cache, StaticCache):
            return None
        capacity, layers = cache.max_cache_len, len(self.layout.layers)
        if past_length + rows > capacity or any(window is not None and window < capacity for window in windows):
            return None
        cos, sin = rotary
        if cos.shape[-1] != self.layout.shape.head_dim or inputs_embeds.dtype != torch.float32:
            return None
        if attention_mask is not None and not bool(attention_mask.all()):
            return None
        if len(cache) == 0:  # a new cache: its storage, as the first write would make it
            empty = inputs_embeds.new_empty(1, self.layout.shape.kv_heads, 0, self.layout.shape.head_dim)
            for index in range(layers):
                cache.update(empty, empty, index)
        if len(cache) != layers:
            return None
        storages = [cache.layer_storage(index) for index in range(layers)]
        if storages[0][0].shape[0] != 1 or storages[0][0].dtype != torch.float32:
            return None
        visible = torch.ones(1, capacity, dtype=torch.bool, device=inputs_embeds.device)  # the op bounds each token
        out = self.layers_step(
            inputs_embeds.reshape(rows, 1, width), cos.reshape(rows, 1, -1), sin.reshape(rows, 1, -1), visible,
            storages, past_length,
        )  # fmt: skip
        if out is None:
            return None
        cache.advance(rows)
        if self.includes_head:
            return out.view(1, 1, -1)
        return apply_linear(self.layout.lm_head, self.layout.final_norm(out.view(1, 1, -1)))


def _no_hooks(layers: Sequence[nn.Module]) -> bool:
    """No forward hook on any module of ``layers``, nor a global one (``nn.modules.module``'s)."""
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return False
    return not any(m._forward_hooks or m._forward_pre_hooks for layer in layers for m in layer.modules())


def compile_decode_step(
    model: StaticStepModel, regional: bool = False, native: bool | None = None, **compile_options: Any
) -> None:
    """Run the model's static steps (one token per row into a prefilled ``StaticCache``) through
    ``torch.compile``, or through a native step where the layers offer one.

    ``native``: with the default (None) and neither ``regional`` nor options, layers whose linear
    type provides a native step for the whole decoder (quantized layers: ``microformers-quant``)
    use it instead of ``torch.compile``: no compilation, the same kernels, one call per token for
    all layers. ``native=True`` requires it (an error where there is none), ``native=False``
    always compiles. Plain float32 ``nn.Linear`` layers are compiled here: their native step (the SDK's
    :class:`~microformers_sdk.static_steps.FloatDecoderStep`) is what ``generate`` runs by default
    (:func:`default_decode_step`) when no step is installed.

    The compiled function is the model's ``logits``, the decoder and head every forward runs; the
    inputs (embedding, rotary, mask over the cache's capacity) are prepared eagerly and the prompt
    itself runs eagerly. The first step of each shape (batch size, cache length, with or without
    padding) pays the compilation. Options go to ``torch.compile`` (default ``dynamic=False,
    fullgraph=True``). On CUDA pass ``mode="reduce-overhead"``: the step then replays as a CUDA graph
    (a :class:`StaticCache` on CUDA marks its storage a static address for it), which at batch 1 on an
    H200 ran a 135M Llama at 3.7x the default mode's tokens/s; on the CPU ``"reduce-overhead"`` has no
    graphs to use. :func:`uncompile_decode_step` goes back.

    ``regional=True`` compiles one decoder layer's static step instead (:func:`static_layer_step`: the
    layer's own forward), shared by every layer (the head stays eager): compilation takes about a tenth
    of the whole graph's, each step runs slower than the whole graph's but faster than eager.

    A native step holds the layers' tensors as they are when it is built: call this again after
    replacing modules or their buffers, or adding hooks.
    """
    refuse_packed(model, "compile_decode_step")
    if native is True and (regional or compile_options):
        raise InputError("compile_decode_step(native=True) compiles nothing: drop regional and the compile options")
    layout = model.decode_step_layout()
    if native is not False and not regional and not compile_options:
        native_step = NativeDecodeStep.build(model, layout, float_layers=False)
        if native_step is not None:
            object.__setattr__(model, "_compiled_decode_step", native_step)
            object.__setattr__(model, "_compiled_decode_options", {"native": True})
            return
        if native:
            raise InputError(
                "compile_decode_step(native=True): these layers have no native decode step (it needs every "
                "projection quantized by microformers-quant, on the CPU with its kernels built, plain RMSNorms and "
                "a SiLU MLP); use native=False"
            )
    options: dict[str, Any] = {"dynamic": False, "fullgraph": True, **compile_options}
    if model.__dict__.get("_compiled_decode_options") == {**options, "regional": regional}:
        return  # already compiled with these options: keep the cached graphs
    if regional:
        step: Any = RegionalDecodeStep(model, layout, torch.compile(static_layer_step, **options))
    else:
        step = torch.compile(model.logits, **options)
    object.__setattr__(model, "_compiled_decode_step", step)
    object.__setattr__(model, "_compiled_decode_options", {**options, "regional": regional})


def uncompile_decode_step(model: nn.Module) -> None:
    """Undo :func:`compile_decode_step`: every step runs eagerly again."""
    model.__dict__.pop("_compiled_decode_step", None)
    model.__dict__.pop("_compiled_decode_options", None)


def default_decode_step(model: Any, float_layers: bool = False) -> NativeDecodeStep | None:
    """The native static step ``generate`` runs by default, or None where there is none to run.

    The one :func:`compile_decode_step` installed when it is native (the user's own choice, kept);
    None when another step is installed (a ``torch.compile`` step: the user decides its cache), for a
    model without :meth:`~StaticStepModel.decode_step_layout`, with packed layers, or whose layers offer
    no native step (hooks, quantized layers off the CPU or without their kernels built, float layers
    unless ``float_layers``). Otherwise a step built now, from the model as it is. ``float_layers=True``
    also builds the SDK's float32 step for plain ``nn.Linear`` layers (what ``generate`` asks for).
    """
    installed = model.__dict__.get("_compiled_decode_step")
    if installed is not None:
        return installed if isinstance(installed, NativeDecodeStep) else None
    layout_of = getattr(model, "decode_step_layout", None)
    if layout_of is None or any(isinstance(module, PackedLinear) for module in model.modules()):
        return None
    return NativeDecodeStep.build(model, layout_of(), float_layers=float_layers)


@contextlib.contextmanager
def decoding_with(model: Any, step: StaticStepRunner) -> Iterator[None]:
    """Inside the block the model's static steps run through ``step``; after it, what was installed before
    (a step of :func:`compile_decode_step`, or none) is back."""
    before = model.__dict__.get("_compiled_decode_step"), model.__dict__.get("_compiled_decode_options")
    if before[0] is step:
        yield
        return
    object.__setattr__(model, "_compiled_decode_step", step)
    object.__setattr__(model, "_compiled_decode_options", {"native": True, "default": True})
    try:
        yield
    finally:
        if model.__dict__.get("_compiled_decode_step") is step:  # not replaced inside the block
            if before[0] is None:
                uncompile_decode_step(model)
            else:
                object.__setattr__(model, "_compiled_decode_step", before[0])
                object.__setattr__(model, "_compiled_decode_options", before[1])

"""A static decoding step through every layer of a Llama-style decoder in one native call.

``QuantLinear.native_decoder_step`` (the SDK's :func:`~microformers_sdk.static_steps.native_decoder_step`
protocol) builds a :class:`QuantDecoderStep` when every projection of every layer is a
``QuantLinear`` without hooks and both norms are plain float32 ``RMSNorm``. The step runs
``mfquant::decoder_step`` (csrc/qlinear.cpp): the norms, the q/k/v, output, gate/up and down
products (the same kernels as the layers' own), the rotary embedding, the write into the static
cache and attention over the visible stored positions, for all layers, and, when the model's
final norm is a plain ``RMSNorm`` and its head a plain ``QuantLinear`` or the ``TiedQuantHead`` of a
quantized embedding, those two as well, without
returning to Python between operations. Per token that saves the ~15 Python and ATen calls per
layer that the eager step spends around the quantized products.

It is the C++ form of the layer the model describes (Llama's ``LlamaDecoderLayer.step_parts``, in the
order its forward runs); ``tests/test_decoder_step.py`` checks it against the layers' own eager forward
on random inputs.

The step holds the layers' tensors as they are when it is built: build it again (call
``compile_decode_step()`` again) after replacing modules or their buffers, or adding hooks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from microformers_sdk.layers import RMSNorm
from microformers_sdk.static_steps import DecoderLayerParts, DecoderStepShape, PackedWeightsStep, native_step_inputs

from . import kernels, modules
from .modules import QuantLinear

_NONE = torch.empty(0)


def _linear_tensors(module: QuantLinear) -> list[torch.Tensor]:
    return _weight_tensors(module, module._parameters.get("bias"))


def _weight_tensors(weight: modules._QuantWeight, bias: torch.Tensor | None) -> list[torch.Tensor]:
    buffers = weight._buffers
    mins = buffers["mins"] if weight.bits == 4 else _NONE
    return [buffers["qweight"], buffers["scales"], mins, _NONE if bias is None else bias.detach()]


def _head_tensors(head: object, hidden: int) -> tuple[list[torch.Tensor], list[int]] | None:
    """The tensors and (group, activation bits) of a hook-free quantized head (its own or tied), else None."""
    if type(head) is modules.TiedQuantHead and not (head._forward_hooks or head._forward_pre_hooks):
        weight, bias = head.embedding, head.bias
    elif _plain(head):
        weight, bias = head, head._parameters.get("bias")  # type: ignore[attr-defined]
    else:
        return None
    if weight.cols != hidden or (bias is not None and bias.dtype != torch.float32):
        return None
    return _weight_tensors(weight, bias), _meta(weight)


def _meta(weight: modules._QuantWeight) -> list[int]:
    """What the step reads of a layer besides its tensors: (group, activation bits, interleaved)."""
    return [weight.group, weight.activation_bits, int(weight.interleaved)]


def _plain(module: object) -> bool:
    return type(module) is QuantLinear and not module._forward_hooks and not module._forward_pre_hooks  # type: ignore[attr-defined]


def _same_kind(*modules: QuantLinear) -> bool:
    return len({(m.bits, m.group, m.activation_bits, m.in_features, m.interleaved) for m in modules}) == 1


def _norm_weight(norm: object, hidden: int) -> torch.Tensor | None:
    if type(norm) is not RMSNorm or norm._forward_hooks or norm._forward_pre_hooks:  # type: ignore[attr-defined]
        return None
    weight = norm.weight  # type: ignore[attr-defined]
    ok = weight.dtype == torch.float32 and weight.shape == (hidden,) and weight.device.type == "cpu"
    return weight.detach() if ok else None


class QuantDecoderStep(PackedWeightsStep):
    """``(hidden, cos, sin, visible, storages, position) -> hidden`` through every layer, or the logits
    when built with the final norm and head (see the module docstring)."""

    def __init__(
        self,
        params: list[torch.Tensor],
        meta: list[int],
        eps: float,
        shape: DecoderStepShape,
        head: tuple[list[torch.Tensor], list[int], float] = ([], [], 0.0),
    ) -> None:
        self.params, self.meta, self.eps, self.shape = params, meta, eps, shape
        self.head, self.head_meta, self.head_eps = head
        self.weights = self.pack_weights()

    def pack_weights(self) -> torch.ScriptObject:
        return torch.classes.mfquant.StepWeights(self.params, self.meta, self.head, self.head_meta)

    @classmethod
    def build(
        cls,
        layers: Sequence[DecoderLayerParts],
        shape: DecoderStepShape,
        final_norm: nn.Module | None = None,
        lm_head: nn.Module | None = None,
    ) -> QuantDecoderStep | None:
        """The step for ``layers`` (and the head after them, when given), or None where they are not all
        quantized, hook-free, of one norm epsilon."""
        if not layers or not isinstance(layers[0].q_proj, QuantLinear) or not kernels.native_available():
            return None  # without the kernels their build (or its absence) has said so
        device = layers[0].q_proj.qweight.device
        if device.type != "cpu":
            kernels.warn_slow_path(device)
            return None
        head: tuple[list[torch.Tensor], list[int], float] = ([], [], 0.0)
        if lm_head is not None:
            width = layers[0].q_proj.in_features
            norm, head_tensors = _norm_weight(final_norm, width), _head_tensors(lm_head, width)
            if norm is None or head_tensors is None:
                return None
            head = ([norm, *head_tensors[0]], head_tensors[1], float(final_norm.variance_epsilon))  # type: ignore[union-attr]
        params: list[torch.Tensor] = []
        meta: list[int] = []
        epsilons = set()
        for parts in layers:
            if not all(_plain(m) for m in parts.linears):
                return None
            q, k, v, o, gate, up, down = parts.linears
            hidden, kv_width = q.in_features, shape.kv_heads * shape.head_dim
            if not (_same_kind(q, k, v) and _same_kind(gate, up)):
                return None
            sizes = (q.out_features, k.out_features, v.out_features, o.in_features, o.out_features)
            if sizes != (shape.heads * shape.head_dim, kv_width, kv_width, q.out_features, hidden):
                return None
            if (gate.in_features, down.in_features, down.out_features) != (hidden, gate.out_features, hidden):
                return None
            norms = [_norm_weight(parts.input_norm, hidden), _norm_weight(parts.post_norm, hidden)]
            if norms[0] is None or norms[1] is None:
                return None
            epsilons.update((float(parts.input_norm.variance_epsilon), float(parts.post_norm.variance_epsilon)))
            params.append(norms[0])
            for module in parts.linears:
                params += _linear_tensors(module)
                meta += _meta(module)
            params.append(norms[1])
        if len(epsilons) != 1:
            return None
        return cls(params, meta, epsilons.pop(), shape, head)

    def __call__(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        visible: torch.Tensor,
        storages: Sequence[tuple[torch.Tensor, torch.Tensor]],
        position: int,
    ) -> torch.Tensor:
        shape, inputs = self.shape, native_step_inputs(hidden, cos, sin, visible, storages)
        out = torch.ops.mfquant.decoder_step(
            inputs.hidden,
            inputs.cos,
            inputs.sin,
            inputs.visible,
            inputs.caches,
            position,
            self.weights,
            self.eps,
            shape.scaling,
            shape.heads,
            shape.kv_heads,
            shape.head_dim,
            self.head_eps,
            modules.KERNEL_MAX_ROWS,
            kernels.GEMM_MIN_ROWS,
        )
        return out.view(-1, 1, out.shape[-1])  # a prompt's step returns its last row only

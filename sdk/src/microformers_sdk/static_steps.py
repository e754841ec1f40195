"""Decoding steps into a preallocated :class:`~microformers_sdk.cache.StaticCache` (fixed shapes, compilable).

A *static step* feeds one token per row into a prefilled ``StaticCache`` that still has room. Each
attention layer then writes its new key/value straight into the cache storage at
``cache_position`` and attends over the whole capacity, the positions not written yet masked out,
so every step has the same tensor shapes and ``torch.compile`` of the decoder compiles once per
batch size and cache length (as gpt-fast does). A decoder uses the three functions here:

* :func:`static_step_position` in its input preparation: the one-element ``cache_position`` tensor
  when this call is a static step, else ``None`` (then the ordinary cache ``update`` path runs);
* :func:`visible_storage` for the step's mask over the storage;
* :func:`one_query_attention` in each attention layer for the step itself, with
  ``Cache.layer_storage`` / ``Cache.advance`` to write into the storage and count the new position.

A pre-norm decoder with a SwiGLU MLP (the Llama layout) can also describe its layers as
:class:`DecoderLayerParts` and ask :func:`native_decoder_step` for a step that runs every layer in
one native call, when the type of its linear layers provides one (quantized layers do), or when
they are plain float32 ``nn.Linear`` layers on the CPU (:class:`FloatDecoderStep`, the SDK's own
``mfsdk::float_decoder_step``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs
import torch
from torch import nn

from . import native
from .cache import Cache, StaticCache
from .layers import RMSNorm

__all__ = [
    "DecoderLayerParts",
    "DecoderStepShape",
    "FloatDecoderStep",
    "NativeDecoderStep",
    "NativeStepInputs",
    "PackedWeightsStep",
    "native_decoder_step",
    "native_step_inputs",
    "one_query_attention",
    "static_step_position",
    "visible_storage",
]


def static_step_position(
    cache: Cache | None, embeds: torch.Tensor, windows: Iterable[int | None], num_layers: int
) -> torch.Tensor | None:
    """``cache_position`` (``[past]``) when one token per row goes into a prefilled ``StaticCache`` with room left.

    ``None`` (use the ordinary path) while gradients are on, for a prompt, for an empty or full cache,
    for a batch that differs from the storage's, and when a sliding window shorter than the storage
    would need the usual windowed mask.
    """
    if not isinstance(cache, StaticCache) or embeds.shape[1] != 1 or torch.is_grad_enabled():
        return None
    past = cache.get_seq_length()
    if past == 0 or past >= cache.max_cache_len or len(cache) != num_layers:
        return None
    if any(window is not None and window < cache.max_cache_len for window in windows):
        return None
    if cache.layer_storage(0)[0].shape[0] != embeds.shape[0]:
        return None
    return torch.tensor([past], device=embeds.device)


def visible_storage(
    capacity: int, past: int, attention_mask: torch.Tensor | None, embeds: torch.Tensor
) -> torch.Tensor:
    """Which of the ``capacity`` stored positions the step's token attends to: boolean ``(batch or 1, 1, 1, capacity)``.

    Positions up to and including ``past`` (the new one) are visible, minus padding from a 2-D
    ``attention_mask``. A row with no real token yet (a padding step under left padding) sees every
    written position instead of none, as :func:`~microformers_sdk.masks.build_attention_mask` does,
    so its softmax stays finite and no NaN reaches the stored states.
    """
    batch, device = embeds.shape[0], embeds.device
    visible = (torch.arange(capacity, device=device) <= past).view(1, 1, 1, capacity)
    if attention_mask is None or attention_mask.dim() != 2 or bool(attention_mask[:, : past + 1].all()):
        return visible
    seen = attention_mask[:, : past + 1].bool()
    seen = seen | ~seen.any(dim=-1, keepdim=True)
    padding = torch.ones(batch, capacity, dtype=torch.bool, device=device)
    padding[:, : past + 1] = seen
    return visible & padding[:, None, None, :]


def one_query_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, scaling: float
) -> torch.Tensor:
    """Attention of one query per row ``(batch, heads, 1, head_dim)`` over the whole storage, ``visible`` selecting keys.

    Query heads are grouped by the key/value head they share, so the cache is never repeated; the
    softmax runs in float32.
    """
    batch, heads, _, head_dim = query.shape
    kv_heads = keys.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)
    scores = torch.matmul(grouped, keys.transpose(2, 3)) * scaling
    scores = scores.masked_fill(~visible, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(values.dtype)
    return torch.matmul(weights, values).reshape(batch, heads, 1, head_dim)


@attrs.frozen
class DecoderLayerParts:
    """One pre-norm decoder layer as a native step reads it: ``h + o_proj(attention(q, k, v))`` with
    ``q, k, v = q/k/v_proj(input_norm(h))`` rotated by the half-split rotary embedding, then
    ``h + down_proj(silu(gate_proj(x)) * up_proj(x))`` with ``x = post_norm(h)``; both norms are
    :class:`~microformers_sdk.layers.RMSNorm`."""

    input_norm: nn.Module
    q_proj: nn.Module
    k_proj: nn.Module
    v_proj: nn.Module
    o_proj: nn.Module
    post_norm: nn.Module
    gate_proj: nn.Module
    up_proj: nn.Module
    down_proj: nn.Module

    @property
    def linears(self) -> tuple[nn.Module, ...]:
        """q, k, v, o, gate, up, down."""
        return (self.q_proj, self.k_proj, self.v_proj, self.o_proj, self.gate_proj, self.up_proj, self.down_proj)


@attrs.frozen
class DecoderStepShape:
    """The attention geometry every layer of the step shares."""

    heads: int
    kv_heads: int
    head_dim: int
    scaling: float


# (hidden (rows, 1, hidden), cos, sin (rows, 1, head_dim), visible (rows or 1, 1, 1, capacity) bool,
#  [(key storage, value storage) per layer], position) -> hidden after the last layer (before the final
#  norm), or the logits (rows, 1, vocab) of a step built with the final norm and head; None where this
#  call's inputs are not the step's to run (the eager step runs them instead). Storage of batch 1 with
#  several rows is a prompt: its rows are consecutive tokens at position, position + 1, ..., each attending
#  causally, and only the last row's result comes back (1, 1, hidden or vocab).
NativeDecoderStep = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Sequence[tuple[torch.Tensor, torch.Tensor]], int],
    "torch.Tensor | None",
]


def native_decoder_step(
    layers: Sequence[DecoderLayerParts],
    shape: DecoderStepShape,
    final_norm: nn.Module | None = None,
    lm_head: nn.Module | None = None,
) -> NativeDecoderStep | None:
    """A static step through all of ``layers`` in one native call, or None where none is available.

    The type of the first ``q_proj`` may provide it as a static
    ``native_decoder_step(layers, shape, final_norm, lm_head)`` (returning None where it cannot run
    these layers); for plain float32 ``nn.Linear`` layers it is :class:`FloatDecoderStep`. The step writes each layer's new key/value
    into its storage at ``position`` (the caller counts it with ``Cache.advance``) and returns the
    hidden states the decoder's final norm receives; given ``final_norm`` (an
    :class:`~microformers_sdk.layers.RMSNorm`) and ``lm_head``, it returns ``lm_head(final_norm(h))``
    instead, or is None where it cannot include them.
    """
    if (final_norm is None) != (lm_head is None):
        raise ValueError("native_decoder_step: give both final_norm and lm_head, or neither")
    if not layers:
        return None
    if type(layers[0].q_proj) is nn.Linear:
        return FloatDecoderStep.build(layers, shape, final_norm, lm_head)
    build = getattr(type(layers[0].q_proj), "native_decoder_step", None)
    return None if build is None else build(layers, shape, final_norm, lm_head)


_NO_BIAS = torch.empty(0)


def _hook_free(module: nn.Module) -> bool:
    return not (module._forward_hooks or module._forward_pre_hooks)


def _float_linear(module: nn.Module, in_features: int, out_features: int) -> list[torch.Tensor] | None:
    """``[weight, bias or empty]`` of a plain, hook-free float32 CPU ``nn.Linear`` of these sizes, else None."""
    if type(module) is not nn.Linear or not _hook_free(module):
        return None
    weight, bias = module.weight, module.bias
    if weight.shape != (out_features, in_features) or not _float_cpu(weight) or not weight.is_contiguous():
        return None
    if bias is not None and not (_float_cpu(bias) and bias.is_contiguous()):
        return None
    return [weight.detach(), _NO_BIAS if bias is None else bias.detach()]


def _float_norm(norm: nn.Module | None, hidden: int) -> tuple[torch.Tensor, float] | None:
    """The weight and epsilon of a plain, hook-free float32 CPU :class:`RMSNorm` of ``hidden``, else None."""
    if type(norm) is not RMSNorm or not _hook_free(norm):
        return None
    weight = norm.weight
    ok = weight.shape == (hidden,) and _float_cpu(weight) and weight.is_contiguous()
    return (weight.detach(), float(norm.variance_epsilon)) if ok else None


@attrs.frozen
class NativeStepInputs:
    """A step's inputs as the native decoder-step ops take them (:func:`native_step_inputs`)."""

    hidden: torch.Tensor  # [rows, width], contiguous
    cos: torch.Tensor  # [rows, head_dim]: one row per input row
    sin: torch.Tensor
    visible: torch.Tensor  # [rows or 1, capacity] bool
    caches: list[torch.Tensor]  # key, value storage of each layer in turn


def native_step_inputs(
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    visible: torch.Tensor,
    storages: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> NativeStepInputs:
    """The arguments of a :data:`NativeDecoderStep` flattened for a native op: positions shared by the batch
    come as one (cos, sin) row, expanded here to one per input row."""
    rows = hidden.shape[0]
    cos, sin = (t.reshape(t.shape[0], -1).expand(rows, -1).contiguous() for t in (cos, sin))
    return NativeStepInputs(
        hidden.reshape(rows, hidden.shape[-1]).contiguous(),
        cos,
        sin,
        visible.reshape(-1, visible.shape[-1]).contiguous(),
        [tensor for pair in storages for tensor in pair],
    )


class PackedWeightsStep:
    """A native step whose op takes its tensors and integers as one object built once, :attr:`weights` (the
    extension's ``StepWeights`` class, decoder_layers.h): converting ~1,000 tensors from a Python list costs
    the op call about 0.3 ms each token. Subclasses say how to build it (:meth:`pack_weights`, from what
    they keep in Python); a copy or an unpickled step builds its own from the copied tensors."""

    weights: torch.ScriptObject

    def pack_weights(self) -> torch.ScriptObject:
        raise NotImplementedError

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("weights", None)  # a ScriptObject without pickling support: rebuilt from the tensors
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.weights = self.pack_weights()


def _float_cpu(tensor: torch.Tensor) -> bool:
    return tensor.dtype == torch.float32 and tensor.device.type == "cpu"


class FloatDecoderStep(PackedWeightsStep):
    """A static step through every layer of a Llama-shaped float32 decoder in one native call
    (``mfsdk::float_decoder_step``, csrc/decoder_step.cpp), and through its final norm and head when built
    with them: the :data:`NativeDecoderStep` of plain float32 ``nn.Linear`` layers on the CPU.

    Its products are the SDK's few-row products, the ones the layers' own eager calls run
    (:func:`~microformers_sdk.layers.row_linear`), so it takes steps of 1 to
    :data:`~microformers_sdk.native.FEW_ROWS_MAX` rows and returns None for more (the eager step, whose
    products are then torch's, runs those). The norms, rotary, attention softmax and SiLU are its own
    float32 code: the same formulas, the sums in another order (results equal the eager step's up to
    float rounding).

    Built only where it computes exactly what the eager step does: every projection a plain ``nn.Linear``
    (not a subclass: no adapter, no quantization) and both norms plain :class:`RMSNorm`, all float32 on
    the CPU, contiguous, without forward hooks, every layer of the same sizes and norm epsilon. The caller
    checks the rest of the model (hooks elsewhere; :func:`~microformers_sdk.decode_steps.default_decode_step`
    does). It holds the tensors as they are when built.
    """

    def __init__(
        self,
        params: list[torch.Tensor],
        eps: float,
        shape: DecoderStepShape,
        head: tuple[list[torch.Tensor], float] = ([], 0.0),
    ) -> None:
        self.params, self.eps, self.shape = params, eps, shape
        self.head, self.head_eps = head
        self.weights = self.pack_weights()

    def pack_weights(self) -> torch.ScriptObject:
        return torch.classes.mfsdk.StepWeights(self.params, [], self.head, [])

    @classmethod
    def build(
        cls,
        layers: Sequence[DecoderLayerParts],
        shape: DecoderStepShape,
        final_norm: nn.Module | None = None,
        lm_head: nn.Module | None = None,
    ) -> FloatDecoderStep | None:
        """The step for ``layers`` (and the final norm and head after them, when given), or None where one of
        them is not as the class docstring says, or the SDK's native ops cannot run here."""
        if not layers or shape.head_dim % 2 or shape.heads % shape.kv_heads:
            return None
        hidden = layers[0].q_proj.in_features if type(layers[0].q_proj) is nn.Linear else 0
        intermediate = layers[0].gate_proj.out_features if type(layers[0].gate_proj) is nn.Linear else 0
        q_width, kv_width = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        sizes = [
            (hidden, q_width), (hidden, kv_width), (hidden, kv_width), (q_width, hidden),
            (hidden, intermediate), (hidden, intermediate), (intermediate, hidden),
        ]  # fmt: skip
        params: list[torch.Tensor] = []
        epsilons: set[float] = set()
        for parts in layers:
            linears = [_float_linear(module, *size) for module, size in zip(parts.linears, sizes, strict=True)]
            norms = [_float_norm(parts.input_norm, hidden), _float_norm(parts.post_norm, hidden)]
            if any(tensors is None for tensors in linears) or norms[0] is None or norms[1] is None:
                return None
            epsilons.update((norms[0][1], norms[1][1]))
            params += [norms[0][0], *linears[0], *linears[1], *linears[2], *linears[3]]  # type: ignore[misc]
            params += [norms[1][0], *linears[4], *linears[5], *linears[6]]  # type: ignore[misc]
        if len(epsilons) != 1:
            return None
        head: tuple[list[torch.Tensor], float] = ([], 0.0)
        if lm_head is not None:
            norm = _float_norm(final_norm, hidden)
            vocab = lm_head.out_features if type(lm_head) is nn.Linear else 0
            head_tensors = _float_linear(lm_head, hidden, vocab)
            if norm is None or head_tensors is None:
                return None
            head = ([norm[0], *head_tensors], norm[1])
        if not native.native_ops_available():
            return None
        return cls(params, epsilons.pop(), shape, head)

    def __call__(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        visible: torch.Tensor,
        storages: Sequence[tuple[torch.Tensor, torch.Tensor]],
        position: int,
    ) -> torch.Tensor | None:
        rows = hidden.shape[0]
        if not 1 <= rows <= native.FEW_ROWS_MAX or visible.dtype != torch.bool or torch.is_autocast_enabled("cpu"):
            return None  # (under autocast the eager step's products run in its lower dtype)
        shape, inputs = self.shape, native_step_inputs(hidden, cos, sin, visible, storages)
        out = torch.ops.mfsdk.float_decoder_step(
            inputs.hidden,
            inputs.cos.float(),
            inputs.sin.float(),
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
        )
        return out.view(-1, 1, out.shape[-1])  # a prompt's step returns its last row only

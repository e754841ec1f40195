"""Small reusable layers: RMSNorm, the gated (SwiGLU-style) MLP, activations by config name."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from microformers.errors import ConfigError

from .masks import exporting_graph
from .native import (
    FEW_ROWS_MAX,
    eager_cpu_inference,
    few_rows_linear,
    many_rows_linear,
    native_prompt_products,
    rms_norm,
    silu_mul_,
)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _gelu_fast(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def _quick_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    # GPT-2's original formula; same function as the tanh approximation, spelled out.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


# ``hidden_act`` values found in config.json files -> function.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_new": _gelu_new,
    "gelu_fast": _gelu_fast,
    "quick_gelu": _quick_gelu,
    "relu": F.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}


def get_activation(name: str, setting: str = "hidden_act") -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation function a config names, or a ``ConfigError`` naming the setting."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"{setting}={name!r} is not a supported activation; use one of {sorted(ACTIVATIONS)}"
        ) from None


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (no mean subtraction, no bias), computed in float32.

    The normalised activations are cast back to the input dtype before the weight multiplies them,
    which is what Llama-family checkpoints were trained with.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        if input_dtype == torch.float32 and self.weight.dtype == torch.float32:
            # The same arithmetic as below in one pass (no casts are needed in float32): without gradients on the
            # CPU the SDK's native norm, else torch's fused one.
            if eager_cpu_inference(hidden_states):
                normed = rms_norm(hidden_states.contiguous(), self.weight, self.variance_epsilon)
                if normed is not None:
                    return normed
            return F.rms_norm(hidden_states, self.weight.shape, self.weight, self.variance_epsilon)
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class OffsetRMSNorm(nn.Module):
    """RMSNorm whose weight is stored as an offset from one: ``norm(x) * (1 + weight)`` (Gemma's layout).

    The weight starts at zeros. Unlike :class:`RMSNorm` the whole product is computed in float32 and
    only the result is cast back to the input dtype, which is what Gemma checkpoints were trained with.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states.float()
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).to(hidden_states.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class ScaledEmbedding(nn.Embedding):
    """An ``nn.Embedding`` whose output is multiplied by ``embed_scale`` (Gemma: ``sqrt(hidden_size)``).

    The scale is rounded to the weight's dtype first (float32, then the model dtype), as the
    reference does, so a bfloat16 model multiplies by the bfloat16 value of the scale. The scale is
    not a parameter or buffer: checkpoints hold only ``weight``.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 embed_scale: float = 1.0, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(num_embeddings, embedding_dim, padding_idx, **kwargs)
        self.embed_scale = float(embed_scale)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        scale = torch.tensor(self.embed_scale, dtype=torch.float32, device=self.weight.device)
        return super().forward(input_ids) * scale.to(self.weight.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, embed_scale={self.embed_scale:g}"


def gated(act: Callable[[torch.Tensor], torch.Tensor], gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``act(gate) * up``; without gradients the product is written into the activation's output, and SiLU
    into ``gate`` itself (callers pass a ``gate`` they own: a projection's fresh output), so no
    intermediate-sized temporary is allocated. The values are the formula's to the bit, except SiLU of
    contiguous float32 CPU tensors without gradients: one native pass with the native decoder step's SiLU (its
    exp within a few ulp of torch's), so a prompt and a decoding step round alike."""
    if torch.jit.is_tracing() or (torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad)):
        return act(gate) * up  # (a trace records one graph, with or without gradients)
    if act is F.silu and gate.shape == up.shape and gate.dtype == up.dtype:
        if eager_cpu_inference(gate):
            product = silu_mul_(gate, up)
            if product is not None:
                return product
        return F.silu(gate, inplace=True).mul_(up)
    activated = act(gate)
    if activated.shape != torch.broadcast_shapes(activated.shape, up.shape) or activated.dtype != up.dtype:
        return activated * up
    return activated.mul_(up)


class GatedMLP(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))``: SwiGLU with ``act="silu"``.

    Parameter names (``gate_proj``, ``up_proj``, ``down_proj``) are the ones Llama, Mistral and
    Qwen2 checkpoints use, so the module loads them without renaming.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, act: str = "silu", bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = get_activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = apply_linears((self.gate_proj, self.up_proj), x)
        return apply_linear(self.down_proj, gated(self.act_fn, gate, up))


class FusedGatedMLP(nn.Module):
    """The gated MLP with gate and up projections in one matrix: ``down_proj(act(gate) * up)``, ``gate, up = gate_up_proj(x).chunk(2)``.

    Parameter names (``gate_up_proj`` of ``2 * intermediate_size`` rows, gate rows first, and
    ``down_proj``) are the ones Phi-3 checkpoints use. One product instead of two is also faster for
    one-token decoding steps.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, act: str = "silu", bias: bool = False) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = get_activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = apply_linear(self.gate_up_proj, x).chunk(2, dim=-1)
        return apply_linear(self.down_proj, gated(self.act_fn, gate, up))


# One input row (a single token of a single sequence, i.e. batch-1 decoding) makes a linear layer a
# matrix-vector product, which is bound by how fast the weight streams from memory. On x86 CPUs with
# MKL, ``F.linear`` on one row reaches about half the bandwidth that a batched product over two halves
# of the weight does (measured in bench/decode.py), so one-row products are split. ``0`` or ``1``
# turns it off (environment variable ``MICROFORMERS_ROW_SPLIT``, read at import).
ROW_SPLIT = int(os.environ.get("MICROFORMERS_ROW_SPLIT", "2"))

# Two to four input rows (batch 2-4 decoding, a few beams, a short prompt): MKL's small-M ``sgemm``
# is slow for ``x @ W.T``, while ``W @ x.T`` (the weight as the left operand) streams the weight
# 1.2-1.4x faster for 2-4 rows, and is no faster from 6 rows on (bench numbers in
# docs/performance.md). Opt-in with ``MICROFORMERS_SMALL_ROWS=4`` (read at import): its rounding depends
# on the weight's memory alignment, so a reloaded checkpoint could differ from the saved model in the
# last bits, and exact reloads matter more than batch 2-4 speed.
SMALL_ROWS = int(os.environ.get("MICROFORMERS_SMALL_ROWS", "1"))


def _plain_cpu_float32(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and x.dtype == torch.float32
        and weight.is_contiguous()
        and not torch.is_grad_enabled()
    )


def _splits_rows(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        ROW_SPLIT > 1
        and x.numel() == weight.shape[1]
        and weight.shape[0] % ROW_SPLIT == 0
        and _plain_cpu_float32(x, weight)
    )


def _few_rows(x: torch.Tensor, weight: torch.Tensor) -> int:
    """How many rows ``x`` has when the few-rows product applies to it, else 0."""
    in_features = weight.shape[1]
    rows = x.numel() // in_features if x.shape[-1] == in_features and in_features else 0
    return rows if 2 <= rows <= SMALL_ROWS and _plain_cpu_float32(x, weight) else 0


def _native_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """The SDK's native product of ``x`` and ``weight``: few rows, or many where :func:`native_prompt_products` (an
    AVX-512 CPU whose BLAS runs slower code: AMD's); None where neither runs."""
    in_features = weight.shape[1]
    if x.shape[-1] != in_features or in_features == 0 or x.numel() == 0:
        return None
    if x.device.type != "cpu" or not _plain_cpu_float32(x, weight) or torch.compiler.is_compiling():
        return None  # (inductor generates its own code for the product)
    if bias is not None and (bias.dtype != torch.float32 or not bias.is_contiguous()):
        return None
    if x.numel() // in_features <= FEW_ROWS_MAX:
        return few_rows_linear(x.contiguous(), weight, bias)
    return many_rows_linear(x.contiguous(), weight, bias) if native_prompt_products() else None


def row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; for one to ``FEW_ROWS_MAX`` float32 input rows without gradients, the
    SDK's native few-row product (:mod:`microformers_sdk.native`), which streams the weight from memory
    once for all rows, 1.4-3x faster than MKL at decoding shapes, and sums each output in the same
    order in any batch of two or more rows (a row alone in an order of its own). Without it, a single row is a
    batched product over weight slices. More rows (a prompt) on an AMD CPU with AVX-512: the SDK's 16-lane product
    (:func:`~microformers_sdk.native.many_rows_linear`), faster and closer to the exact result than MKL's there;
    elsewhere (Intel's CPUs, where MKL runs its AVX-512 code) ``F.linear``.

    The result equals ``F.linear``'s up to float rounding (the sums run in a different order).
    Inside ``torch.compile`` a single row becomes a multiply-and-sum over the weight, which compiles to
    one vectorised reduction streaming the weight at close to memory bandwidth.
    """
    if exporting_graph():  # a traced or exported graph: the portable product, no branch on the row count
        return F.linear(x, weight, bias)
    if x.numel() == weight.shape[1] and torch.compiler.is_compiling():
        out = (x.unsqueeze(-2) * weight).sum(-1)
        return out if bias is None else out + bias
    native = _native_product(x, weight, bias)
    if native is not None:
        return native
    rows = _few_rows(x, weight)
    if rows:
        column = x.reshape(rows, weight.shape[1]).contiguous().t()  # a transposed block, as for one row
        out = torch.mm(weight, column).t().contiguous().view(*x.shape[:-1], weight.shape[0])
        return out if bias is None else out + bias
    if not _splits_rows(x, weight):
        return F.linear(x, weight, bias)
    out_features, in_features = weight.shape
    parts = weight.view(ROW_SPLIT, out_features // ROW_SPLIT, in_features)
    # A transposed row (strides (0, 1, in_features)): a plain (in_features, 1) column is 6x slower in MKL.
    column = x.reshape(1, in_features).t().expand(ROW_SPLIT, in_features, 1)
    out = torch.bmm(parts, column).view(*x.shape[:-1], out_features)
    return out if bias is None else out + bias


def apply_linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``, through :func:`row_linear` when ``module`` is a plain ``nn.Linear`` without hooks.

    Subclasses (quantised layers, adapters) and hooked modules are always called normally.
    """
    if type(module) is nn.Linear and not (module._forward_hooks or module._forward_pre_hooks):
        return row_linear(x, module.weight, module.bias)
    return module(x)


def apply_linears(modules: Sequence[nn.Module], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tuple(apply_linear(m, x) for m in modules)``: several layers of one input (q/k/v, gate/up).

    A layer type may compute them in one call: a static ``linear_group(modules, x)`` on the first
    layer's type returns the outputs, or None where it cannot (the layers are then called one by one).
    Quantized layers use it to run q/k/v in one kernel call.
    """
    group = getattr(type(modules[0]), "linear_group", None)
    outputs = group(modules, x) if group is not None else None
    return tuple(apply_linear(module, x) for module in modules) if outputs is None else outputs

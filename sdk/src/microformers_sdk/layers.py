"""Small reusable layers: RMSNorm, the gated (SwiGLU-style) MLP, activations by config name."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from microformers.errors import ConfigError


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
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


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
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

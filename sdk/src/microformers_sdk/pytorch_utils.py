"""Module helpers the reference keeps in ``pytorch_utils``: ``apply_chunking_to_forward`` (feed-forward chunking)
and ``prune_linear_layer`` (what head pruning does to a projection)."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch import nn

from microformers.errors import InputError

__all__ = ["apply_chunking_to_forward", "prune_linear_layer"]


def apply_chunking_to_forward(
    forward_fn: Callable[..., torch.Tensor], chunk_size: int, chunk_dim: int, *input_tensors: torch.Tensor
) -> torch.Tensor:
    """``forward_fn(*input_tensors)`` computed ``chunk_size`` slices of ``chunk_dim`` at a time, concatenated.

    For functions that treat the slices independently (a transformer's MLP over positions) the result is
    the unchunked one, while only one chunk's intermediate activations are alive at a time. ``chunk_size``
    0 calls ``forward_fn`` once. Unlike the reference, a length that ``chunk_size`` does not divide is
    accepted (the last chunk is shorter) instead of raising, since the result is the same.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 0:
        raise InputError(f"chunk_size (chunk_size_feed_forward) must be an integer >= 0 (0: no chunking), got {chunk_size!r}")
    if not input_tensors:
        raise InputError("apply_chunking_to_forward needs at least one input tensor")
    parameters = len(inspect.signature(forward_fn).parameters)
    if parameters != len(input_tensors):
        raise InputError(
            f"forward_fn takes {parameters} arguments but {len(input_tensors)} input tensors were given; "
            "pass one tensor per argument"
        )
    length = input_tensors[0].shape[chunk_dim]
    if any(tensor.shape[chunk_dim] != length for tensor in input_tensors):
        raise InputError(
            f"every input tensor must have the same size along chunk_dim={chunk_dim}: "
            f"{[tuple(tensor.shape) for tensor in input_tensors]}"
        )
    if chunk_size == 0 or chunk_size >= length:
        return forward_fn(*input_tensors)
    pieces = zip(*(tensor.split(chunk_size, dim=chunk_dim) for tensor in input_tensors))
    return torch.cat([forward_fn(*piece) for piece in pieces], dim=chunk_dim)


def prune_linear_layer(layer: nn.Linear, index: torch.Tensor, dim: int = 0) -> nn.Linear:
    """A new ``nn.Linear`` keeping only the output (``dim=0``) or input (``dim=1``) features listed in ``index``.

    Weights (and, for ``dim=0``, the bias entries) are copied; device, dtype and ``requires_grad`` follow ``layer``.
    """
    if dim not in (0, 1):
        raise InputError(f"prune_linear_layer: dim must be 0 (output features) or 1 (input features), got {dim!r}")
    index = torch.as_tensor(index, dtype=torch.long)
    features = layer.weight.shape[dim]
    outside = index.device.type != "meta" and index.numel() and (int(index.min()) < 0 or int(index.max()) >= features)
    if index.dim() != 1 or outside:
        raise InputError(f"prune_linear_layer: index must be a 1-D tensor of feature indices in [0, {features})")
    index = index.to(layer.weight.device)
    weight = layer.weight.index_select(dim, index).detach().clone()
    kept = nn.Linear(weight.shape[1], weight.shape[0], bias=layer.bias is not None, device=weight.device,
                     dtype=weight.dtype)  # fmt: skip
    kept.weight = nn.Parameter(weight, requires_grad=layer.weight.requires_grad)
    if layer.bias is not None:
        bias = layer.bias.index_select(0, index) if dim == 0 else layer.bias
        kept.bias = nn.Parameter(bias.detach().clone(), requires_grad=layer.bias.requires_grad)
    return kept

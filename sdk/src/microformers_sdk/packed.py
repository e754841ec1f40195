"""Opt-in float32 weights packed in oneDNN's blocked layout, for batched decoding on CPU.

MKL's float32 product is slow for a few input rows (batched decoding: one row per sequence): a
1536x576 layer at 8 rows took 431-462 us through ``F.linear``, 266-268 us with the weight packed
once by oneDNN for 8 rows, 188 us against 183 us (``row_linear``) at one row, and 5.7 against 5.3 ms
at 512 rows (a prompt). :func:`pack_linear_weights` swaps a model's plain ``nn.Linear`` layers for
:class:`PackedLinear`; the float weights are replaced, not kept, so memory afterwards is float32's
(the peak while packing is higher: the checkpoint's mapped pages and the packed copies meet). It is
for inference only: packed layers have no gradient, ``state_dict`` refuses them (load the model
again to train or save), the dtype cannot change, and it does not compile (inductor cannot lower
the packed product; :func:`refuse_packed` is what ``compile_decode_step`` checks). Outputs equal
``F.linear``'s up to summation order.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from microformers.errors import InputError
from microformers.model_helpers import copy_out_of_memory_map

# The input rows oneDNN lays the weight out for: measured fastest for 8 rows, and as fast as the
# one-row path at one row (hint 1 made 8 rows 1.5x slower, hint 512 made one row 1.2x slower).
PACK_FOR_ROWS = 8


class PackedLinear(nn.Module):
    """An inference-only ``nn.Linear`` whose float32 weight is held in oneDNN's packed layout."""

    def __init__(self, linear: nn.Linear, name: str = "") -> None:
        super().__init__()
        _check_packable(linear.weight, name)
        self.in_features, self.out_features, self.name = linear.in_features, linear.out_features, name
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), PACK_FOR_ROWS)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or (self.bias is not None and self.bias.requires_grad)):
            raise InputError(
                f"layer '{self.name}' was packed for inference (pack_linear_weights) and has no gradient; load the "
                "model again to train it, or run under torch.no_grad()"
            )
        if x.dtype != torch.float32:
            raise InputError(f"layer '{self.name}' is packed for float32 inputs, got {x.dtype}")
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        raise InputError(
            f"layer '{prefix.rstrip('.')}' was packed for inference (pack_linear_weights): its weight is in "
            "oneDNN's layout and cannot be saved or read back; load the model again to save or train it"
        )

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        probe = fn(torch.zeros(1))
        if probe.dtype != torch.float32 or probe.device.type != "cpu":
            raise InputError(
                f"layer '{self.name}' was packed for float32 on the CPU (pack_linear_weights); load the model again "
                f"with the dtype and device you need instead of converting it to {probe.dtype} on {probe.device}"
            )
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed for {PACK_FOR_ROWS} rows"


def _check_packable(weight: torch.Tensor, name: str) -> None:
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        raise InputError(
            f"pack_linear_weights: layer '{name}' is {weight.dtype} on {weight.device}; packing needs float32 "
            "weights on the CPU (load with dtype=torch.float32)"
        )


def pack_linear_weights(model: nn.Module) -> int:
    """Swap every plain, hook-free float32 ``nn.Linear`` of ``model`` for a :class:`PackedLinear`.

    Layers whose weight another module also uses (an LM head tied to the embeddings) stay as they
    are: packing would keep a second copy. Returns how many layers were packed.
    """
    if not torch.backends.mkldnn.is_available():
        raise InputError("pack_linear_weights needs PyTorch built with oneDNN (mkldnn), which this build lacks")
    uses: dict[int, int] = {}
    for module in model.modules():
        for tensor in module._parameters.values():
            if tensor is not None:
                uses[id(tensor)] = uses.get(id(tensor), 0) + 1
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.Linear
        and not (module._forward_hooks or module._forward_pre_hooks)
        and uses[id(module.weight)] == 1
    ]
    for name, module in targets:  # all checked before any is swapped: never a half-packed model
        _check_packable(module.weight, name)
    for name, module in targets:
        parent_name, _, leaf = name.rpartition(".")
        model.get_submodule(parent_name).register_module(leaf, PackedLinear(module, name))
    # Copied out of the checkpoint's memory map, the map closes and the packed model holds what
    # float32 does (814 MB after decoding SmolLM2, against 1228 MB without this copy).
    copy_out_of_memory_map(model)
    return len(targets)


def refuse_packed(model: nn.Module, action: str) -> None:
    """Raise a clear error when ``model`` has layers packed by :func:`pack_linear_weights` (``action`` names what cannot run)."""
    packed = [module.name for module in model.modules() if isinstance(module, PackedLinear)]
    if packed:
        raise InputError(
            f"{action}: {len(packed)} layers (first '{packed[0]}') were packed for eager inference by "
            "pack_linear_weights, which torch.compile cannot lower; decode eagerly, or load the model again "
            "without packing to compile it"
        )

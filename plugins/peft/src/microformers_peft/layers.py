"""The modules an adapter puts into a model, laid out as ``peft`` lays them out.

``LoraLayer`` wraps a linear layer: the original becomes ``base_layer`` and each named adapter adds
``lora_A.<name>`` (``in -> r``) and ``lora_B.<name>`` (``r -> out``), so parameter names match
``peft``'s (``...q_proj.base_layer.weight``, ``...q_proj.lora_A.default.weight``). ``ModulesToSave``
keeps the original module as ``original_module`` and one trainable copy per adapter in
``modules_to_save.<name>``. Attributes not found on a wrapper are looked up on the wrapped module.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from microformers_sdk.layers import apply_linear

from .config import AdapterError


def is_linear_like(module: nn.Module) -> bool:
    """``nn.Linear``, GPT-2's ``Conv1D``, or a (quantised) layer named ``*Linear*`` with in/out features."""
    if isinstance(module, (nn.Linear, LoraLayer)):
        return True
    name = type(module).__name__
    return name == "Conv1D" or ("Linear" in name and hasattr(module, "in_features") and hasattr(module, "out_features"))


def is_transposed(module: nn.Module) -> bool:
    """Whether the layer stores its weight ``(in_features, out_features)`` (``fan_in_fan_out``)."""
    return type(module).__name__ == "Conv1D"


class _Passthrough(nn.Module):
    _wrapped_attr = ""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == self._wrapped_attr or name.startswith("_"):
                raise
            return getattr(self._target(), name)

    def _target(self) -> nn.Module:
        raise NotImplementedError


class LoraLayer(_Passthrough):
    """``base_layer(x) + sum over active adapters of lora_B(lora_A(dropout(x))) * scaling``."""

    _wrapped_attr = "base_layer"

    def __init__(self, base_layer: nn.Module) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.lora_dropout = nn.ModuleDict()
        self.lora_A = nn.ModuleDict()
        self.lora_B = nn.ModuleDict()
        self.scaling: dict[str, float] = {}
        self.transposed = is_transposed(base_layer)
        self.active_adapters: list[str] = []
        self.disabled = False
        self.merged_adapters: list[str] = []
        weight = getattr(base_layer, "weight", None)
        in_features = getattr(base_layer, "in_features", None)
        out_features = getattr(base_layer, "out_features", None)
        if (in_features is None or out_features is None) and isinstance(weight, torch.Tensor):
            out_features, in_features = weight.shape[::-1] if self.transposed else weight.shape
        self.in_features, self.out_features = int(in_features), int(out_features)

    def _target(self) -> nn.Module:
        return self.base_layer

    def _lora_dtype_device(self) -> tuple[torch.dtype, torch.device]:
        weight = getattr(self.base_layer, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.device.type != "meta":
            return (weight.dtype if weight.is_floating_point() else torch.float32), weight.device
        return torch.float32, torch.device("cpu")

    def add(self, name: str, r: int, scaling: float, dropout: float, init: bool | str) -> None:
        dtype, device = self._lora_dtype_device()
        self.lora_dropout[name] = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.lora_A[name] = nn.Linear(self.in_features, r, bias=False, device=device, dtype=dtype)
        self.lora_B[name] = nn.Linear(r, self.out_features, bias=False, device=device, dtype=dtype)
        self.scaling[name] = scaling
        self.train(self.base_layer.training)  # a model in eval mode gets adapters in eval mode (no dropout)
        if init is True:
            nn.init.kaiming_uniform_(self.lora_A[name].weight, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B[name].weight)
        elif init == "gaussian":
            nn.init.normal_(self.lora_A[name].weight, std=1 / r)
            nn.init.zeros_(self.lora_B[name].weight)
        # init False keeps nn.Linear's own initialisation of both (an adapter that is not the identity)

    def remove(self, name: str) -> None:
        if name in self.merged_adapters:
            self.unmerge([name])
        for holder in (self.lora_dropout, self.lora_A, self.lora_B):
            if name in holder:
                del holder[name]
        self.scaling.pop(name, None)
        self.active_adapters = [a for a in self.active_adapters if a != name]

    @property
    def adapter_names(self) -> list[str]:
        return list(self.lora_A.keys())

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.disabled and self.merged_adapters:
            self.unmerge()
        # a plain nn.Linear base keeps the SDK's fast one-row (decode) product
        result = self.base_layer(x, *args, **kwargs) if args or kwargs else apply_linear(self.base_layer, x)
        if self.disabled:
            return result
        for name in self.active_adapters:
            lora_a = self.lora_A._modules.get(name)
            if lora_a is None or name in self.merged_adapters:
                continue
            # the products of lora_A / lora_B as in their forward, minus the per-call module overhead
            inputs = x if x.dtype == lora_a.weight.dtype else x.to(lora_a.weight.dtype)
            dropout = self.lora_dropout._modules[name]
            if not isinstance(dropout, nn.Identity):
                inputs = dropout(inputs)
            update = F.linear(F.linear(inputs, lora_a.weight), self.lora_B._modules[name].weight) * self.scaling[name]
            result = result + (update if update.dtype == result.dtype else update.to(result.dtype))
        return result

    # -- merging -----------------------------------------------------------------------------------
    def delta_weight(self, name: str) -> torch.Tensor:
        """``B @ A * scaling`` in the base weight's layout."""
        delta = self.lora_B[name].weight @ self.lora_A[name].weight
        return (delta.T if self.transposed else delta) * self.scaling[name]

    def _base_weight(self, where: str) -> torch.Tensor:
        weight = getattr(self.base_layer, "weight", None)
        if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
            raise AdapterError(
                f"cannot merge the adapter into {where}: its base layer {type(self.base_layer).__name__} has no "
                "floating-point weight (a quantised layer). Keep the adapter unmerged, or load the base model "
                "without quantization to merge."
            )
        return weight

    def merge(self, names: list[str] | None = None, safe_merge: bool = False, where: str = "the layer") -> None:
        for name in names if names is not None else self.active_adapters:
            if name not in self.lora_A or name in self.merged_adapters:
                continue
            weight = self._base_weight(where)
            with torch.no_grad():
                delta = self.delta_weight(name).to(weight.dtype)
                if safe_merge and not torch.isfinite(weight + delta).all():
                    raise AdapterError(f"merging adapter '{name}' into {where} gives non-finite weights; not merged")
                weight.add_(delta)
            self.merged_adapters.append(name)

    def unmerge(self, names: list[str] | None = None) -> None:
        for name in list(reversed(self.merged_adapters)):
            if names is not None and name not in names:
                continue
            weight = self._base_weight("the layer")
            with torch.no_grad():
                weight.sub_(self.delta_weight(name).to(weight.dtype))
            self.merged_adapters.remove(name)

    def extra_repr(self) -> str:
        return f"adapters={self.adapter_names}, active={self.active_adapters}, merged={self.merged_adapters}"


class ModulesToSave(_Passthrough):
    """A module trained and saved in full: the active adapter's copy runs, the original is kept."""

    _wrapped_attr = "original_module"

    def __init__(self, original_module: nn.Module) -> None:
        super().__init__()
        self.original_module = original_module
        self.modules_to_save = nn.ModuleDict()
        self.active_adapters: list[str] = []
        self.disabled = False
        self.train(original_module.training)

    def add(self, name: str) -> None:
        clone = copy.deepcopy(self.original_module)
        clone.requires_grad_(True)
        self.modules_to_save[name] = clone

    def remove(self, name: str) -> None:
        if name in self.modules_to_save:
            del self.modules_to_save[name]
        self.active_adapters = [a for a in self.active_adapters if a != name]

    @property
    def adapter_names(self) -> list[str]:
        return list(self.modules_to_save.keys())

    def _target(self) -> nn.Module:
        if not self.disabled:
            for name in self.active_adapters:
                if name in self.modules_to_save:
                    return self.modules_to_save[name]
        return self.original_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)

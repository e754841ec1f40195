"""``DebugUnderflowOverflow``: find the first module whose weights, inputs or outputs hold inf or nan.

Every module gets a forward hook that records one frame (the module's name and class, and the absolute min
and max of each weight, input and output tensor); the last ``max_frames_to_save`` frames are kept. The first
frame with an inf or nan is printed with the frames before it (what led there), and the forward pass stops
with an ``UnderflowOverflowError`` naming that module. ``TrainingArguments(debug="underflow_overflow")``
installs it on the Trainer's model.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from microformers import MicroformersError


class UnderflowOverflowError(MicroformersError, ValueError):
    """A module produced inf/nan (or ``abort_after_batch_num`` was reached) under ``DebugUnderflowOverflow``."""


class DebugOption(str, enum.Enum):  # noqa: UP042 (str mix-in: also runs on Python 3.10)
    """Values of ``TrainingArguments.debug``."""

    UNDERFLOW_OVERFLOW = "underflow_overflow"
    TPU_METRICS_DEBUG = "tpu_metrics_debug"


def _describe(value: Any, label: str, lines: list[str]) -> bool:
    """Append a line per tensor in ``value`` (nested tuples/dicts too); True if one holds inf or nan."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 0 or not (value.is_floating_point() or value.is_complex()):
            lines.append(f"{'':>8} {'':>8} {label} ({value.dtype}, {tuple(value.shape)})")
            return False
        magnitude = value.detach().abs()
        bad = not bool(torch.isfinite(magnitude).all())
        note = (
            "  <- "
            + ", ".join(k for k, hit in (("nan", magnitude.isnan().any()), ("inf", magnitude.isinf().any())) if hit)
            if bad
            else ""
        )
        lines.append(f"{float(magnitude.min()):8.2e} {float(magnitude.max()):8.2e} {label}{note}")
        return bad
    if isinstance(value, Mapping):
        return any([_describe(v, f"{label}[{k!r}]", lines) for k, v in value.items()])
    if isinstance(value, (tuple, list)):
        return any([_describe(v, f"{label}[{i}]", lines) for i, v in enumerate(value)])
    return False


class DebugUnderflowOverflow:
    """Hook every module of ``model``; stop at the first inf/nan (see the module docstring).

    ``trace_batch_nums``: print every frame of these batches (0-based) instead of watching them;
    ``abort_after_batch_num``: stop after that batch (to look at a few traced batches only).
    """

    def __init__(
        self,
        model: nn.Module,
        max_frames_to_save: int = 21,
        trace_batch_nums: list[int] | None = None,
        abort_after_batch_num: int | None = None,
    ) -> None:
        self.model = model
        self.trace_batch_nums = list(trace_batch_nums or [])
        self.abort_after_batch_num = abort_after_batch_num
        self.frames: collections.deque[str] = collections.deque(maxlen=max_frames_to_save)
        self.batch_number = 0
        self.names = {module: name or type(model).__name__ for name, module in model.named_modules()}
        self.handles = [module.register_forward_hook(self._hook) for module in model.modules()]

    def remove(self) -> None:
        """Take the hooks off the model."""
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def _hook(self, module: nn.Module, inputs: Any, output: Any) -> None:
        tracing = self.batch_number in self.trace_batch_nums
        name = self.names.get(module, type(module).__name__)
        lines = [f"{'':>17} {name} {type(module).__name__}"]
        bad = False
        for pname, param in module.named_parameters(recurse=False):
            bad |= _describe(param, pname, lines)
        bad |= _describe(inputs, "input", lines)
        bad |= _describe(output, "output", lines)
        self.frames.append("\n".join(lines))
        if tracing:
            print(self.frames[-1])
        if bad and not tracing:
            print(f"\nDetected inf/nan during batch_number={self.batch_number}")
            print(f"Last {len(self.frames)} forward frames:")
            print(f"{'abs min':8} {'abs max':8} metadata")
            print("\n".join(self.frames) + "\n")
            self.frames.clear()
            raise UnderflowOverflowError(
                f"DebugUnderflowOverflow: inf/nan first appeared in module {name!r} ({type(module).__name__}) "
                f"during batch {self.batch_number}; the frames printed above show the values that led there"
            )
        if module is self.model:
            self.batch_number += 1
            if self.abort_after_batch_num is not None and self.batch_number > self.abort_after_batch_num:
                raise UnderflowOverflowError(
                    f"DebugUnderflowOverflow: stopped after batch {self.batch_number - 1} "
                    f"(abort_after_batch_num={self.abort_after_batch_num})"
                )

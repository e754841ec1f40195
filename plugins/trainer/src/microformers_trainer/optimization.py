"""Learning-rate schedules (``get_scheduler`` and the ``get_*_schedule*`` functions) and Adafactor.

Every schedule is a ``torch.optim.lr_scheduler.LambdaLR`` whose multiplier is a ``functools.partial`` of a
module-level function, so ``scheduler.state_dict()`` holds plain numbers and loads with ``weights_only=True``.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from microformers import ConfigError


class SchedulerType(str, enum.Enum):  # noqa: UP042 (str mix-in: also runs on Python 3.10)
    """Names accepted by ``TrainingArguments.lr_scheduler_type`` and ``get_scheduler``."""

    LINEAR = "linear"
    COSINE = "cosine"
    COSINE_WITH_RESTARTS = "cosine_with_restarts"
    POLYNOMIAL = "polynomial"
    CONSTANT = "constant"
    CONSTANT_WITH_WARMUP = "constant_with_warmup"
    INVERSE_SQRT = "inverse_sqrt"
    COSINE_WITH_MIN_LR = "cosine_with_min_lr"

    def __str__(self) -> str:
        return self.value


def scheduler_type(name: str | SchedulerType) -> SchedulerType:
    """``name`` as a :class:`SchedulerType`, or a ``ConfigError`` listing the supported names."""
    try:
        return SchedulerType(name)
    except ValueError:
        raise ConfigError(
            f"lr_scheduler_type={name!r} is not a known schedule; use one of "
            f"{', '.join(repr(s.value) for s in SchedulerType)}"
        ) from None


def _warmup(step: int, warmup: int) -> float:
    return step / max(1, warmup)


def _constant(step: int) -> float:
    return 1.0


def _constant_warmup(step: int, *, warmup: int) -> float:
    return _warmup(step, warmup) if step < warmup else 1.0


def _linear(step: int, *, warmup: int, total: int) -> float:
    if step < warmup:
        return _warmup(step, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def _cosine(step: int, *, warmup: int, total: int, num_cycles: float, min_ratio: float = 0.0) -> float:
    if step < warmup:
        return _warmup(step, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    factor = 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress))
    return max(0.0, factor * (1.0 - min_ratio) + min_ratio)


def _cosine_restarts(step: int, *, warmup: int, total: int, num_cycles: int) -> float:
    if step < warmup:
        return _warmup(step, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((num_cycles * progress) % 1.0))))


def _polynomial(step: int, *, warmup: int, total: int, lr_init: float, lr_end: float, power: float) -> float:
    if step < warmup:
        return _warmup(step, warmup)
    if step > total:
        return lr_end / lr_init
    remaining = 1 - (step - warmup) / (total - warmup)
    return ((lr_init - lr_end) * remaining**power + lr_end) / lr_init


def _inverse_sqrt(step: int, *, warmup: int, timescale: int) -> float:
    if step < warmup:
        return _warmup(step, warmup)
    shift = timescale - warmup
    return 1.0 / math.sqrt((step + shift) / timescale)


def _lambda(optimizer: Optimizer, fn: Callable[..., float], last_epoch: int, **kwargs: Any) -> LambdaLR:
    return LambdaLR(optimizer, functools.partial(fn, **kwargs) if kwargs else fn, last_epoch=last_epoch)


def get_constant_schedule(optimizer: Optimizer, last_epoch: int = -1) -> LambdaLR:
    """The optimizer's learning rate, unchanged."""
    return _lambda(optimizer, _constant, last_epoch)


def get_constant_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, last_epoch: int = -1) -> LambdaLR:
    """Linear warmup from 0 over ``num_warmup_steps``, then constant."""
    return _lambda(optimizer, _constant_warmup, last_epoch, warmup=num_warmup_steps)


def get_linear_schedule_with_warmup(
    optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int, last_epoch: int = -1
) -> LambdaLR:
    """Linear warmup, then linear decay to 0 at ``num_training_steps``."""
    return _lambda(optimizer, _linear, last_epoch, warmup=num_warmup_steps, total=num_training_steps)


def get_cosine_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
) -> LambdaLR:
    """Linear warmup, then a cosine from the initial rate to 0 (``num_cycles=0.5``: half a wave)."""
    return _lambda(
        optimizer, _cosine, last_epoch, warmup=num_warmup_steps, total=num_training_steps, num_cycles=num_cycles
    )


def get_cosine_with_min_lr_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
    min_lr: float | None = None,
    min_lr_rate: float | None = None,
) -> LambdaLR:
    """Cosine decay that ends at ``min_lr`` (or ``min_lr_rate`` times the initial rate) instead of 0."""
    if (min_lr is None) == (min_lr_rate is None):
        raise ConfigError("cosine_with_min_lr needs exactly one of min_lr or min_lr_rate (lr_scheduler_kwargs)")
    ratio = min_lr_rate if min_lr_rate is not None else min_lr / optimizer.defaults["lr"]
    return _lambda(
        optimizer,
        _cosine,
        last_epoch,
        warmup=num_warmup_steps,
        total=num_training_steps,
        num_cycles=num_cycles,
        min_ratio=ratio,
    )


def get_cosine_with_hard_restarts_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: int = 1,
    last_epoch: int = -1,
) -> LambdaLR:
    """Linear warmup, then ``num_cycles`` cosine decays, each restarting at the initial rate."""
    return _lambda(
        optimizer,
        _cosine_restarts,
        last_epoch,
        warmup=num_warmup_steps,
        total=num_training_steps,
        num_cycles=num_cycles,
    )


def get_polynomial_decay_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    lr_end: float = 1e-7,
    power: float = 1.0,
    last_epoch: int = -1,
) -> LambdaLR:
    """Linear warmup, then polynomial decay (``power``) from the initial rate to ``lr_end``."""
    lr_init = optimizer.defaults["lr"]
    if not lr_init > lr_end:
        raise ConfigError(f"polynomial schedule: lr_end ({lr_end}) must be smaller than the initial lr ({lr_init})")
    return _lambda(
        optimizer,
        _polynomial,
        last_epoch,
        warmup=num_warmup_steps,
        total=num_training_steps,
        lr_init=lr_init,
        lr_end=lr_end,
        power=power,
    )


def get_inverse_sqrt_schedule(
    optimizer: Optimizer, num_warmup_steps: int, timescale: int | None = None, last_epoch: int = -1
) -> LambdaLR:
    """Linear warmup, then decay proportional to ``1/sqrt(step)`` (``timescale`` defaults to the warmup or 10,000)."""
    if timescale is None:
        timescale = num_warmup_steps or 10_000
    return _lambda(optimizer, _inverse_sqrt, last_epoch, warmup=num_warmup_steps, timescale=timescale)


_SCHEDULES: dict[SchedulerType, Callable[..., LambdaLR]] = {
    SchedulerType.LINEAR: get_linear_schedule_with_warmup,
    SchedulerType.COSINE: get_cosine_schedule_with_warmup,
    SchedulerType.COSINE_WITH_RESTARTS: get_cosine_with_hard_restarts_schedule_with_warmup,
    SchedulerType.POLYNOMIAL: get_polynomial_decay_schedule_with_warmup,
    SchedulerType.CONSTANT: get_constant_schedule,
    SchedulerType.CONSTANT_WITH_WARMUP: get_constant_schedule_with_warmup,
    SchedulerType.INVERSE_SQRT: get_inverse_sqrt_schedule,
    SchedulerType.COSINE_WITH_MIN_LR: get_cosine_with_min_lr_schedule_with_warmup,
}


def get_scheduler(
    name: str | SchedulerType,
    optimizer: Optimizer,
    num_warmup_steps: int | None = None,
    num_training_steps: int | None = None,
    scheduler_specific_kwargs: dict[str, Any] | None = None,
) -> LambdaLR:
    """The schedule called ``name`` for ``optimizer``; raises ``ConfigError`` when a needed count is missing."""
    kind = scheduler_type(name)
    fn = _SCHEDULES[kind]
    if kind is SchedulerType.CONSTANT:
        return fn(optimizer)
    extra = dict(scheduler_specific_kwargs or {})
    if num_warmup_steps is None:
        raise ConfigError(f"the {kind.value!r} schedule needs num_warmup_steps")
    if kind in (SchedulerType.CONSTANT_WITH_WARMUP, SchedulerType.INVERSE_SQRT):
        return fn(optimizer, num_warmup_steps=num_warmup_steps, **extra)
    if num_training_steps is None:
        raise ConfigError(f"the {kind.value!r} schedule needs num_training_steps")
    return fn(optimizer, num_warmup_steps=num_warmup_steps, num_training_steps=num_training_steps, **extra)


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern, 2018): Adam-like updates with a factored second moment for matrices.

    With ``relative_step=True`` (default) the step size is ``min(1e-2, 1/sqrt(step))`` (or ``1e-6 * step``
    with ``warmup_init``) and ``lr`` must be ``None``; ``scale_parameter`` multiplies it by the parameter's
    RMS (at least ``eps[1]``). For an external schedule use ``scale_parameter=False, relative_step=False, lr=...``.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float | None = None,
        eps: tuple[float, float] = (1e-30, 1e-3),
        clip_threshold: float = 1.0,
        decay_rate: float = -0.8,
        beta1: float | None = None,
        weight_decay: float = 0.0,
        scale_parameter: bool = True,
        relative_step: bool = True,
        warmup_init: bool = False,
    ) -> None:
        if lr is not None and relative_step:
            raise ConfigError("Adafactor: pass lr=None with relative_step=True, or relative_step=False to use lr")
        if warmup_init and not relative_step:
            raise ConfigError("Adafactor: warmup_init=True needs relative_step=True")
        defaults = {
            "lr": lr,
            "eps": eps,
            "clip_threshold": clip_threshold,
            "decay_rate": decay_rate,
            "beta1": beta1,
            "weight_decay": weight_decay,
            "scale_parameter": scale_parameter,
            "relative_step": relative_step,
            "warmup_init": warmup_init,
        }
        super().__init__(params, defaults)

    @staticmethod
    def _rms(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.norm(2) / (tensor.numel() ** 0.5)

    @staticmethod
    def _step_size(group: dict[str, Any], state: dict[str, Any]) -> Any:
        size = group["lr"]
        if group["relative_step"]:
            floor = 1e-6 * state["step"] if group["warmup_init"] else 1e-2
            size = min(floor, 1.0 / math.sqrt(state["step"]))
        if group["scale_parameter"]:
            return max(group["eps"][1], state["RMS"]) * size
        return size

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(param, group)
        return loss

    def _update(self, param: torch.Tensor, group: dict[str, Any]) -> None:
        grad = param.grad
        if grad.is_sparse:
            raise ConfigError("Adafactor does not support sparse gradients")
        if grad.dtype in (torch.float16, torch.bfloat16):
            grad = grad.float()
        factored = grad.dim() >= 2
        momentum = group["beta1"] is not None
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["RMS"] = 0
            if momentum:
                state["exp_avg"] = torch.zeros_like(grad)
            if factored:
                state["exp_avg_sq_row"] = grad.new_zeros(grad.shape[:-1])
                state["exp_avg_sq_col"] = grad.new_zeros(grad.shape[:-2] + grad.shape[-1:])
            else:
                state["exp_avg_sq"] = torch.zeros_like(grad)
        weights = param.float() if param.dtype in (torch.float16, torch.bfloat16) else param
        state["step"] += 1
        state["RMS"] = self._rms(weights)
        lr = self._step_size(group, state)
        beta2 = 1.0 - math.pow(state["step"], group["decay_rate"])
        squared = grad.square() + group["eps"][0]
        if factored:
            row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
            row.mul_(beta2).add_(squared.mean(dim=-1), alpha=1.0 - beta2)
            col.mul_(beta2).add_(squared.mean(dim=-2), alpha=1.0 - beta2)
            row_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
            update = torch.mul(row_factor, col.unsqueeze(-2).rsqrt()).mul_(grad)
        else:
            second = state["exp_avg_sq"]
            second.mul_(beta2).add_(squared, alpha=1.0 - beta2)
            update = second.rsqrt().mul_(grad)
        update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
        update.mul_(lr)
        if momentum:
            state["exp_avg"].mul_(group["beta1"]).add_(update, alpha=1 - group["beta1"])
            update = state["exp_avg"]
        if group["weight_decay"] != 0:
            weights.add_(weights, alpha=-group["weight_decay"] * lr)
        weights.add_(-update)
        if weights is not param:
            param.copy_(weights)

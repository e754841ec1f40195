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
from torch.optim.lr_scheduler import LambdaLR, ReduceLROnPlateau

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
    REDUCE_ON_PLATEAU = "reduce_lr_on_plateau"
    COSINE_WITH_MIN_LR = "cosine_with_min_lr"
    COSINE_WARMUP_WITH_MIN_LR = "cosine_warmup_with_min_lr"
    WARMUP_STABLE_DECAY = "warmup_stable_decay"
    GREEDY = "greedy"

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


def _cosine_warmup_min_lr(
    step: int, *, warmup: int, total: int, num_cycles: float, min_ratio: float, warmup_ratio: float | None
) -> float:
    """The ``cosine_warmup_with_min_lr`` multiplier: counted one step ahead, so step 0 already trains."""
    if step < warmup:
        if warmup_ratio is None:
            return (step + 1.0) / max(1.0, warmup)
        return warmup_ratio + (1.0 - warmup_ratio) * step / max(1, warmup - 1)
    progress = (step - warmup + 1.0) / max(1.0, total - warmup)
    factor = 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress))
    return max(0.0, factor * (1 - min_ratio) + min_ratio)


def get_cosine_with_min_lr_schedule_with_warmup_lr_rate(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
    min_lr: float | None = None,
    min_lr_rate: float | None = None,
    warmup_lr_rate: float | None = None,
) -> LambdaLR:
    """Cosine decay to ``min_lr`` (or ``min_lr_rate`` x the initial rate) after a warmup that starts at
    ``warmup_lr_rate`` x the initial rate (default ``1/num_warmup_steps``), one step ahead of the plain cosine."""
    if (min_lr is None) == (min_lr_rate is None):
        raise ConfigError("cosine_warmup_with_min_lr needs exactly one of min_lr or min_lr_rate (lr_scheduler_kwargs)")
    ratio = min_lr_rate if min_lr_rate is not None else min_lr / optimizer.defaults["lr"]
    return _lambda(
        optimizer,
        _cosine_warmup_min_lr,
        last_epoch,
        warmup=num_warmup_steps,
        total=num_training_steps,
        num_cycles=num_cycles,
        min_ratio=ratio,
        warmup_ratio=warmup_lr_rate,
    )


_WSD_SHAPES = ("linear", "cosine", "1-sqrt")


def _wsd(
    step: int,
    *,
    warmup: int,
    stable: int,
    decay: int,
    warmup_type: str,
    decay_type: str,
    min_ratio: float,
    num_cycles: float,
) -> float:
    if step < warmup:
        progress = step / max(1, warmup)
        rise = {
            "linear": progress,
            "cosine": 0.5 * (1.0 - math.cos(math.pi * progress)),
            "1-sqrt": 1.0 - math.sqrt(1.0 - progress),
        }[warmup_type]
        return max(0.0, rise * (1.0 - min_ratio) + min_ratio)
    if step < warmup + stable:
        return 1.0
    if step < warmup + stable + decay:
        progress = (step - warmup - stable) / max(1, decay)
        fall = {
            "linear": 1.0 - progress,
            "cosine": 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress)),
            "1-sqrt": 1.0 - math.sqrt(progress),
        }[decay_type]
        return max(0.0, fall * (1.0 - min_ratio) + min_ratio)
    return min_ratio


def get_wsd_schedule(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_decay_steps: int,
    num_training_steps: int | None = None,
    num_stable_steps: int | None = None,
    warmup_type: str = "linear",
    decay_type: str = "cosine",
    min_lr_ratio: float = 0,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
) -> LambdaLR:
    """Warmup-stable-decay: rise from ``min_lr_ratio`` over ``num_warmup_steps``, hold, then fall back over
    ``num_decay_steps`` (each shape ``linear``, ``cosine`` or ``1-sqrt``). The stable phase is
    ``num_stable_steps``, or what ``num_training_steps`` leaves; after the decay the rate stays at the minimum."""
    if num_stable_steps is None and num_training_steps is None:
        raise ConfigError("warmup_stable_decay needs num_training_steps or num_stable_steps")
    for name, shape in (("warmup_type", warmup_type), ("decay_type", decay_type)):
        if shape not in _WSD_SHAPES:
            raise ConfigError(f"warmup_stable_decay: {name}={shape!r}; use one of {', '.join(map(repr, _WSD_SHAPES))}")
    if num_stable_steps is None:
        num_stable_steps = num_training_steps - num_warmup_steps - num_decay_steps
    return _lambda(
        optimizer,
        _wsd,
        last_epoch,
        warmup=num_warmup_steps,
        stable=num_stable_steps,
        decay=num_decay_steps,
        warmup_type=warmup_type,
        decay_type=decay_type,
        min_ratio=min_lr_ratio,
        num_cycles=num_cycles,
    )


def get_reduce_on_plateau_schedule(optimizer: Optimizer, **kwargs: Any) -> ReduceLROnPlateau:
    """torch's ``ReduceLROnPlateau`` (the Trainer steps it with the evaluation metric, not every step)."""
    return ReduceLROnPlateau(optimizer, **kwargs)


class GreedyLR:
    """A metric-driven schedule (GreedyLR, arXiv 2512.14527): after more than ``patience`` evaluations that
    improve on the best metric the rate is divided by ``factor`` (up to ``max_lr``), after more than
    ``patience`` that do not it is multiplied by it (down to ``min_lr``); ``warmup`` / ``cooldown`` evaluations
    are ignored after each rise / fall. Held at ``min_lr`` for ``reset_start`` reductions, it starts over from
    the initial rates. ``smooth=True`` judges the mean of the last ``window_size`` metrics. Stepped with
    ``step(metric)`` by the Trainer after each evaluation (``metric_for_best_model``)."""

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.95,
        patience: int = 10,
        threshold: float = 1e-6,
        threshold_mode: str = "abs",
        cooldown: int = 0,
        warmup: int = 0,
        min_lr: float | list[float] = 1e-3,
        max_lr: float | list[float] = 1.0,
        eps: float = 1e-8,
        verbose: bool = False,
        smooth: bool = False,
        window_size: int = 50,
        reset_start: int = 500,
    ) -> None:
        if not factor < 1.0:
            raise ConfigError(f"GreedyLR(factor={factor}): the factor must be below 1")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ConfigError(
                f"GreedyLR(mode={mode!r}, threshold_mode={threshold_mode!r}): use 'min'/'max' and 'rel'/'abs'"
            )
        groups = len(optimizer.param_groups)

        def per_group(name: str, value: float | list[float]) -> list[float]:
            if isinstance(value, (list, tuple)):
                if len(value) != groups:
                    raise ConfigError(f"GreedyLR({name}=...): {len(value)} values for {groups} parameter groups")
                return list(value)
            return [value] * groups

        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode, self.eps = threshold, threshold_mode, eps
        self.cooldown, self.warmup, self.verbose = cooldown, warmup, verbose
        self.min_lrs, self.max_lrs = per_group("min_lr", min_lr), per_group("max_lr", max_lr)
        self.smooth, self.window_size = smooth, window_size
        self.reset_start = self.reset_start_original = reset_start
        self._init_lrs = [float(g["lr"]) for g in optimizer.param_groups]
        self._last_lr = list(self._init_lrs)
        self._window: list[float] = []
        self._start_over()
        self.last_epoch = 0

    def _start_over(self) -> None:
        self.best = math.inf if self.mode == "min" else -math.inf
        self.num_bad_epochs = self.num_good_epochs = 0
        self.cooldown_counter = self.warmup_counter = 0
        self.reset_start = self.reset_start_original
        self._window = []

    def _improves(self, value: float) -> bool:
        if self.threshold_mode == "rel":
            if self.mode == "min":
                return value < self.best * (1.0 - self.threshold)
            return value > self.best * (1.0 + self.threshold)
        return value < self.best - self.threshold if self.mode == "min" else value > self.best + self.threshold

    def step(self, metrics: float, epoch: int | None = None) -> None:
        value = float(metrics)
        if self.smooth:
            self._window = [*self._window, value][-self.window_size :]
            value = sum(self._window) / len(self._window)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.cooldown_counter > 0 or self.warmup_counter > 0:
            if self.cooldown_counter > 0:
                self.cooldown_counter -= 1
            else:
                self.warmup_counter -= 1
            self.num_bad_epochs = self.num_good_epochs = 0
        else:
            if self._improves(value):
                self.best = value
                self.num_good_epochs, self.num_bad_epochs = self.num_good_epochs + 1, 0
            else:
                self.num_good_epochs, self.num_bad_epochs = 0, self.num_bad_epochs + 1
            if self.num_good_epochs > self.patience:
                self._scale(1.0 / self.factor)
                self.reset_start = self.reset_start_original
                self.warmup_counter, self.num_good_epochs = self.warmup, 0
            elif self.num_bad_epochs > self.patience:
                self._scale(self.factor)
                self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
                if all(float(g["lr"]) <= low for g, low in zip(self.optimizer.param_groups, self.min_lrs)):
                    self.reset_start -= 1
                    if self.reset_start <= 0:
                        for group, lr in zip(self.optimizer.param_groups, self._init_lrs):
                            group["lr"] = lr
                        self._start_over()
        self._last_lr = [float(g["lr"]) for g in self.optimizer.param_groups]

    def _scale(self, by: float) -> None:
        for i, group in enumerate(self.optimizer.param_groups):
            old = float(group["lr"])
            new = min(old * by, self.max_lrs[i]) if by > 1 else max(old * by, self.min_lrs[i])
            if abs(new - old) > self.eps:
                group["lr"] = new
                if self.verbose:
                    print(f"step {self.last_epoch}: learning rate of group {i} set to {new:.4e}")

    def get_last_lr(self) -> list[float]:
        return self._last_lr

    def state_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in vars(self).items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        known = set(vars(self)) - {"optimizer"}
        for key, value in state_dict.items():
            if key in known:
                setattr(self, key, value)
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr


def get_greedy_schedule(optimizer: Optimizer, **kwargs: Any) -> GreedyLR:
    """A :class:`GreedyLR` for ``optimizer`` (``kwargs``: its arguments)."""
    return GreedyLR(optimizer, **kwargs)


# schedules stepped with an evaluation metric (after each evaluation) instead of once per optimizer step
METRIC_SCHEDULES = (ReduceLROnPlateau, GreedyLR)


_SCHEDULES: dict[SchedulerType, Callable[..., Any]] = {
    SchedulerType.LINEAR: get_linear_schedule_with_warmup,
    SchedulerType.COSINE: get_cosine_schedule_with_warmup,
    SchedulerType.COSINE_WITH_RESTARTS: get_cosine_with_hard_restarts_schedule_with_warmup,
    SchedulerType.POLYNOMIAL: get_polynomial_decay_schedule_with_warmup,
    SchedulerType.CONSTANT: get_constant_schedule,
    SchedulerType.CONSTANT_WITH_WARMUP: get_constant_schedule_with_warmup,
    SchedulerType.INVERSE_SQRT: get_inverse_sqrt_schedule,
    SchedulerType.COSINE_WITH_MIN_LR: get_cosine_with_min_lr_schedule_with_warmup,
    SchedulerType.REDUCE_ON_PLATEAU: get_reduce_on_plateau_schedule,
    SchedulerType.COSINE_WARMUP_WITH_MIN_LR: get_cosine_with_min_lr_schedule_with_warmup_lr_rate,
    SchedulerType.WARMUP_STABLE_DECAY: get_wsd_schedule,
    SchedulerType.GREEDY: get_greedy_schedule,
}


def get_scheduler(
    name: str | SchedulerType,
    optimizer: Optimizer,
    num_warmup_steps: int | None = None,
    num_training_steps: int | None = None,
    scheduler_specific_kwargs: dict[str, Any] | None = None,
) -> Any:
    """The schedule called ``name`` for ``optimizer``; raises ``ConfigError`` when a needed count is missing."""
    kind = scheduler_type(name)
    fn = _SCHEDULES[kind]
    if kind is SchedulerType.CONSTANT:
        return fn(optimizer)
    extra = dict(scheduler_specific_kwargs or {})
    if kind in (SchedulerType.REDUCE_ON_PLATEAU, SchedulerType.GREEDY):
        return fn(optimizer, **extra)
    if num_warmup_steps is None:
        raise ConfigError(f"the {kind.value!r} schedule needs num_warmup_steps")
    if kind in (SchedulerType.CONSTANT_WITH_WARMUP, SchedulerType.INVERSE_SQRT):
        return fn(optimizer, num_warmup_steps=num_warmup_steps, **extra)
    if kind is SchedulerType.WARMUP_STABLE_DECAY:
        return fn(optimizer, num_warmup_steps=num_warmup_steps, num_training_steps=num_training_steps, **extra)
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

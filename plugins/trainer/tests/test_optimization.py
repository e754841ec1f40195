"""Schedules and Adafactor: the reference's learning rate at every step and its Adafactor updates."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch

import microformers
from microformers import ConfigError

transformers = pytest.importorskip("transformers", reason="the reference implementation is the test oracle")

STEPS, WARMUP = 30, 5

CASES: list[tuple[str, dict[str, Any]]] = [
    ("get_constant_schedule", {}),
    ("get_constant_schedule_with_warmup", {"num_warmup_steps": WARMUP}),
    ("get_linear_schedule_with_warmup", {"num_warmup_steps": WARMUP, "num_training_steps": STEPS}),
    ("get_cosine_schedule_with_warmup", {"num_warmup_steps": WARMUP, "num_training_steps": STEPS}),
    ("get_cosine_schedule_with_warmup", {"num_warmup_steps": 0, "num_training_steps": STEPS, "num_cycles": 1.5}),
    (
        "get_cosine_with_hard_restarts_schedule_with_warmup",
        {"num_warmup_steps": WARMUP, "num_training_steps": STEPS, "num_cycles": 3},
    ),
    (
        "get_polynomial_decay_schedule_with_warmup",
        {"num_warmup_steps": WARMUP, "num_training_steps": STEPS, "lr_end": 1e-4, "power": 2.0},
    ),
    ("get_inverse_sqrt_schedule", {"num_warmup_steps": WARMUP}),
    ("get_inverse_sqrt_schedule", {"num_warmup_steps": 0, "timescale": 7}),
]


def _lrs(make: Any, steps: int = STEPS + 5) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize(("name", "kwargs"), CASES)
def test_schedule_matches_reference_at_every_step(name: str, kwargs: dict[str, Any]) -> None:
    ours = _lrs(lambda opt: getattr(microformers, name)(opt, **kwargs))
    theirs = _lrs(lambda opt: getattr(transformers, name)(opt, **kwargs))
    assert ours == pytest.approx(theirs, abs=1e-12)
    assert len(set(ours)) > 1 or name == "get_constant_schedule"


@pytest.mark.parametrize("kind", ["linear", "cosine", "cosine_with_restarts", "polynomial", "constant_with_warmup"])
def test_get_scheduler_by_name_matches_reference(kind: str) -> None:
    def build(module: Any) -> Any:
        return lambda opt: module.get_scheduler(kind, opt, num_warmup_steps=3, num_training_steps=20)

    assert _lrs(build(microformers), 22) == pytest.approx(_lrs(build(transformers), 22), abs=1e-12)


def test_scheduler_state_roundtrips_with_weights_only() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = microformers.get_linear_schedule_with_warmup(opt, 2, 10)
    for _ in range(4):
        opt.step()
        sched.step()
    buffer = io.BytesIO()
    torch.save(sched.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    opt2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched2 = microformers.get_linear_schedule_with_warmup(opt2, 2, 10)
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_scheduler_errors() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ConfigError, match="lr_scheduler_type='nope'.*'linear'"):
        microformers.get_scheduler("nope", opt, 1, 10)
    with pytest.raises(ConfigError, match="num_training_steps"):
        microformers.get_scheduler("linear", opt, num_warmup_steps=1)
    with pytest.raises(ConfigError, match="lr_end"):
        microformers.get_polynomial_decay_schedule_with_warmup(opt, 1, 10, lr_end=0.5)
    assert microformers.SchedulerType("cosine") is microformers.SchedulerType.COSINE


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"lr": 1e-2, "relative_step": False, "scale_parameter": False, "weight_decay": 0.1},
        {"beta1": 0.9, "warmup_init": True},
    ],
)
def test_adafactor_matches_reference(kwargs: dict[str, Any]) -> None:
    def run(cls: Any) -> list[torch.Tensor]:
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(6, 5)), torch.nn.Parameter(torch.randn(5))]
        opt = cls(params, **kwargs)
        g = torch.Generator().manual_seed(1)
        for _ in range(5):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g)
            opt.step()
        return [p.detach().clone() for p in params]

    for ours, theirs in zip(run(microformers.Adafactor), run(transformers.Adafactor)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-7)


def test_adafactor_rejects_lr_with_relative_step() -> None:
    with pytest.raises(ConfigError, match="relative_step"):
        microformers.Adafactor([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)

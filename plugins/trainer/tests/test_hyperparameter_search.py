"""Trainer.hyperparameter_search with optuna: each trial trains a fresh model_init() model with its values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import lm_rows, tiny_gpt2

from microformers import BestRun, ConfigError, Trainer

optuna = pytest.importorskip("optuna", reason="hyperparameter_search's backend (requirements-test.txt)")


def _trainer(args_factory: Any, **kwargs: Any) -> Trainer:
    args = args_factory(num_train_epochs=1, logging_steps=1, **kwargs)
    return Trainer(model_init=tiny_gpt2, args=args, train_dataset=lm_rows(16), eval_dataset=lm_rows(8, seed=1))


def _space(trial: Any) -> dict[str, Any]:
    return {
        "learning_rate": trial.suggest_categorical("learning_rate", [0.0, 3e-2]),
        "per_device_train_batch_size": trial.suggest_categorical("per_device_train_batch_size", [4, 8]),
    }


def test_search_returns_the_best_trial_of_values_really_trained_with(args_factory: Any) -> None:
    trainer = _trainer(args_factory, save_strategy="steps", save_steps=2)
    untrained = trainer.evaluate()["eval_loss"]
    seen: list[tuple[dict[str, Any], float, int]] = []

    def objective(metrics: dict[str, float]) -> float:
        seen.append(({"lr": trainer.args.learning_rate}, metrics["eval_loss"], trainer.state.global_step))
        return metrics["eval_loss"]

    sampler = optuna.samplers.GridSampler({"learning_rate": [0.0, 3e-2], "per_device_train_batch_size": [4, 8]})
    best = trainer.hyperparameter_search(
        hp_space=_space,
        compute_objective=objective,
        n_trials=4,
        direction="minimize",
        backend="optuna",
        sampler=sampler,
    )
    assert isinstance(best, BestRun) and isinstance(best.run_id, str)
    assert set(best.hyperparameters) == {"learning_rate", "per_device_train_batch_size"}
    assert best.objective == min(loss for _, loss, _ in seen)
    assert best.hyperparameters["learning_rate"] == 3e-2  # training lowers the loss
    for values, loss, _ in seen:
        if values["lr"] == 0.0:  # a fresh model_init() model, untouched by a zero learning rate
            assert loss == pytest.approx(untrained, abs=1e-6)
    assert sorted(steps for _, _, steps in seen) == [2, 2, 4, 4]  # 16 rows at batch 8 and 4
    assert trainer.args.learning_rate == args_factory().learning_rate  # the search's own arguments are restored
    runs = sorted(p.name for p in Path(trainer.args.output_dir).iterdir())
    assert runs == ["run-0", "run-1", "run-2", "run-3"]  # each trial's checkpoints in its own folder
    assert all((Path(trainer.args.output_dir) / run / "checkpoint-2").is_dir() for run in runs)


def test_default_objective_and_maximize(args_factory: Any) -> None:
    trainer = _trainer(args_factory)

    def space(trial: Any) -> dict[str, Any]:
        return {"learning_rate": trial.suggest_float("learning_rate", 1e-3, 1e-1, log=True)}

    best = trainer.hyperparameter_search(hp_space=space, n_trials=2, direction="maximize")
    assert best.run_summary is None  # optuna runs carry no summary, as in the reference
    assert best.objective > 0 and 1e-3 <= best.hyperparameters["learning_rate"] <= 1e-1


def test_search_errors(args_factory: Any) -> None:
    trainer = _trainer(args_factory)
    with pytest.raises(ConfigError, match="backend='ray'.*optuna only"):
        trainer.hyperparameter_search(backend="ray")
    with pytest.raises(ConfigError, match="direction='sideways'"):
        trainer.hyperparameter_search(direction="sideways")
    with pytest.raises(ConfigError, match=r"unknown arguments \['resources_per_trial'\]"):
        trainer.hyperparameter_search(resources_per_trial={"cpu": 1})
    with pytest.raises(ConfigError, match=r"\['dropout'\] are not TrainingArguments fields"):
        trainer.hyperparameter_search(hp_space=lambda t: {"dropout": t.suggest_float("dropout", 0, 1)}, n_trials=1)
    plain = Trainer(model=tiny_gpt2(), args=args_factory(), train_dataset=lm_rows(4), eval_dataset=lm_rows(4))
    with pytest.raises(ConfigError, match="needs Trainer\\(model_init=...\\)"):
        plain.hyperparameter_search(n_trials=1)

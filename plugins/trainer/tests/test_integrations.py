"""Reporting integrations for real: MLflow into a local file store, W&B in offline mode; refused names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import lm_rows, tiny_gpt2

from microformers import ConfigError, Trainer


def test_mlflow_logs_parameters_and_every_metric_to_a_local_store(
    args_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow = pytest.importorskip("mlflow", reason="report_to='mlflow' needs mlflow-skinny (requirements-test.txt)")
    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.x asks for this to use a plain folder
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "tiny")
    monkeypatch.setenv("MLFLOW_TAGS", json.dumps({"team": "tests"}))
    args = args_factory(max_steps=3, report_to="mlflow", run_name="mlflow-run")
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(12))
    trainer.train()
    assert mlflow.active_run() is None  # the run the callback started ended with training

    client = mlflow.tracking.MlflowClient(store.as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.info.run_name == "mlflow-run" and run.data.tags["team"] == "tests"
    assert run.data.params["learning_rate"] == str(args.learning_rate) and run.data.params["n_embd"] == "16"
    history = client.get_metric_history(run.info.run_id, "loss")
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [(m.step, m.value) for m in history] == [(h["step"], pytest.approx(h["loss"])) for h in logged]
    assert client.get_metric_history(run.info.run_id, "train_runtime")


def test_wandb_offline_run_holds_config_and_history(
    args_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wandb = pytest.importorskip("wandb", reason="report_to='wandb' needs wandb (requirements-test.txt)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_PROJECT", "tiny-project")
    monkeypatch.setenv("WANDB_SILENT", "true")
    args = args_factory(max_steps=2, report_to="wandb", run_name="wandb-run")
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(8))
    trainer.train()
    run = wandb.run
    assert run is not None and run.name == "wandb-run" and run.project == "tiny-project"
    assert run.config["learning_rate"] == args.learning_rate and run.config["n_layer"] == 2
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert run.summary["train/loss"] == pytest.approx(losses[-1])
    assert run.summary["train/global_step"] == 2
    wandb.finish()
    (files,) = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert files.stat().st_size > 0


def test_wandb_model_upload_is_refused(args_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="report_to='wandb' needs wandb (requirements-test.txt)")
    monkeypatch.setenv("WANDB_LOG_MODEL", "end")
    with pytest.raises(ConfigError, match="WANDB_LOG_MODEL='end'"):
        Trainer(model=tiny_gpt2(), args=args_factory(report_to="wandb"), train_dataset=lm_rows(4))


@pytest.mark.parametrize("name", ["azure_ml", "dagshub", "flyte", "swanlab", "neptune", "trackio"])
def test_integrations_not_provided_are_refused_by_name(args_factory: Any, name: str) -> None:
    with pytest.raises(ConfigError, match=f"report_to='{name}'.*no {name} integration.*register_callbacks"):
        args_factory(report_to=["jsonl", name])


def test_an_unknown_report_to_name_is_refused_by_the_training_arguments_themselves(args_factory: Any) -> None:
    with pytest.raises(
        ConfigError, match=r"report_to='bogus'\): no installed plugin provides this integration.*'jsonl'"
    ):
        args_factory(report_to="bogus")


def test_all_is_every_installed_integration(args_factory: Any) -> None:
    import microformers

    installed = sorted(microformers.registry.names("callbacks"))
    assert args_factory(report_to="all").report_to == installed
    with pytest.raises(ConfigError, match="'none' cannot be combined"):
        args_factory(report_to=["none", "jsonl"])


@pytest.mark.parametrize(
    ("name", "install"),
    [
        ("wandb", "pip install wandb"),
        ("mlflow", "pip install mlflow-skinny"),
        ("dvclive", "pip install dvclive"),
        ("codecarbon", "pip install codecarbon"),
        ("comet_ml", "pip install comet-ml"),
        ("clearml", "pip install clearml"),
    ],
)
def test_a_known_integration_without_its_library_says_what_to_install(
    args_factory: Any, monkeypatch: pytest.MonkeyPatch, name: str, install: str
) -> None:
    import microformers

    # as discovery sees it when the library is not installed: the plugin registers only jsonl
    monkeypatch.setattr(microformers.registry, "names", lambda kind: ["jsonl"])
    with pytest.raises(ConfigError, match=f"report_to='{name}'\\): its library is not installed; {install}"):
        args_factory(report_to=name)

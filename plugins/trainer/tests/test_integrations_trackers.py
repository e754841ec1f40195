"""DVCLive, CodeCarbon, Comet and ClearML integrations for real, offline, in temporary folders: each test
reads back the files the library wrote and finds the parameters and metrics the Trainer logged."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import lm_rows, tiny_gpt2

from microformers import ConfigError, Trainer, TrainerCallback
from microformers_sdk.testing import assert_close


def _logged(trainer: Any, key: str) -> list[tuple[int, float]]:
    return [(h["step"], h[key]) for h in trainer.state.log_history if key in h]


def _callback(trainer: Any, name: str) -> Any:
    (cb,) = [cb for cb in trainer.callback_handler.callbacks if type(cb).__name__ == name]
    return cb


def test_dvclive_writes_params_and_one_metrics_row_per_log_call(
    args_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("dvclive", reason="report_to='dvclive' needs dvclive (requirements-test.txt)")
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    monkeypatch.chdir(tmp_path)  # DVCLive's default folder is ./dvclive
    args = args_factory(max_steps=3, report_to="dvclive")
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(12))
    trainer.train()

    folder = tmp_path / "dvclive"
    params = (folder / "params.yaml").read_text()
    assert f"learning_rate: {args.learning_rate}" in params and "max_steps: 3" in params
    rows = list(csv.DictReader((folder / "plots" / "metrics" / "loss.tsv").open(), delimiter="\t"))
    losses = _logged(trainer, "loss")
    # one row per log call: DVCLive's step counts log calls (next_step after each); then the summary call
    assert len(losses) == 3 and [int(r["step"]) for r in rows] == [0, 1, 2]
    assert_close([float(r["loss"]) for r in rows], [v for _, v in losses], rtol=1e-6, atol=0)
    latest = json.loads((folder / "metrics.json").read_text())  # DVCLive names train_runtime train/runtime
    assert_close(latest["train"]["runtime"], trainer.state.log_history[-1]["train_runtime"], rtol=1e-6, atol=0)
    assert_close(latest["train"]["loss"], trainer.state.log_history[-1]["train_loss"], rtol=1e-6, atol=0)
    assert latest["step"] == 3


def test_dvclive_log_model_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dvclive", reason="report_to='dvclive' needs dvclive (requirements-test.txt)")
    from microformers_trainer.integrations import DVCLiveCallback

    monkeypatch.setenv("HF_DVCLIVE_LOG_MODEL", "sometimes")
    with pytest.raises(ConfigError, match="HF_DVCLIVE_LOG_MODEL='sometimes'.*true, false, all"):
        DVCLiveCallback()
    with pytest.raises(ConfigError, match=r"log_model='every'\): use True, False or 'all'"):
        DVCLiveCallback(log_model="every")
    with pytest.raises(ConfigError, match="must be a dvclive.Live, got str"):
        DVCLiveCallback(live="dvclive")


def test_codecarbon_offline_tracker_writes_the_training_emissions(
    args_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("codecarbon", reason="report_to='codecarbon' needs codecarbon (requirements-test.txt)")
    monkeypatch.setenv("CODECARBON_COUNTRY_ISO_CODE", "FRA")  # a country: the offline tracker, no network
    monkeypatch.setenv("CODECARBON_LOG_LEVEL", "error")
    monkeypatch.chdir(tmp_path)  # no .codecarbon.config of the checkout is read
    args = args_factory(max_steps=2, report_to="codecarbon")
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(8))
    cb = _callback(trainer, "CodeCarbonCallback")
    trainer.train()

    assert type(cb.tracker).__name__ == "OfflineEmissionsTracker"
    (row,) = list(csv.DictReader((Path(args.output_dir) / "emissions.csv").open()))
    assert row["country_iso_code"] == "FRA" and row["project_name"] == "codecarbon"
    assert float(row["duration"]) > 0 and float(row["energy_consumed"]) > 0 and float(row["emissions"]) > 0


def test_comet_offline_experiment_zip_holds_parameters_and_metrics(
    args_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("comet_ml", reason="report_to='comet_ml' needs comet-ml (requirements-test.txt)")
    offline = tmp_path / "comet"
    for name, value in {
        "COMET_START_ONLINE": "false",
        "COMET_OFFLINE_DIRECTORY": str(offline),
        "COMET_PROJECT_NAME": "tiny",
        "COMET_AUTO_LOG_ENV_DETAILS": "false",
        "COMET_AUTO_LOG_CO2": "false",
        "COMET_AUTO_LOG_GIT_METADATA": "false",
        "COMET_AUTO_LOG_OUTPUT_LOGGER": "false",
        "COMET_DISABLE_ANNOUNCEMENT": "true",
    }.items():
        monkeypatch.setenv(name, value)
    args = args_factory(max_steps=3, report_to="comet_ml", run_name="comet-run")
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(12))
    trainer.train()
    experiment = _callback(trainer, "CometCallback").experiment
    assert experiment is not None and experiment.get_name() == "comet-run"
    experiment.end()  # the experiment stays open after training (as the reference); ending it writes the zip

    (archive,) = list(offline.glob("*.zip"))
    with zipfile.ZipFile(archive) as z:
        assert json.loads(z.read("experiment.json"))["project_name"] == "tiny"
        messages = [json.loads(line) for line in z.read("messages.json").splitlines() if line.strip()]
    payloads = [m["payload"] for m in messages]
    params = {p["param"]["paramName"]: p["param"]["paramValue"] for p in payloads if "param" in p}
    assert params["args|learning_rate"] == args.learning_rate and params["config|n_embd"] == 16
    metrics = [p["metric"] for p in payloads if "metric" in p]
    train_loss = [(m["step"], m["metricValue"]) for m in metrics if m["metricName"] == "train/loss"]
    # exact: the zip holds the floats the callback passed on, at the global step
    assert train_loss == _logged(trainer, "loss") and len(train_loss) == 3
    assert any(m["metricName"] == "train/train_runtime" for m in metrics)


def test_clearml_offline_session_holds_hyperparameters_and_scalars(
    args_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("clearml", reason="report_to='clearml' needs clearml (requirements-test.txt)")
    monkeypatch.setenv("CLEARML_OFFLINE_MODE", "1")
    monkeypatch.setenv("HOME", str(tmp_path))  # ClearML's cache (the offline session) lives under ~/.clearml
    monkeypatch.setenv("CLEARML_PROJECT", "tiny")
    monkeypatch.setenv("CLEARML_LOG_MODEL", "false")
    # the repository as ClearML's environment detector reads it: no git commands over this checkout (minutes)
    monkeypatch.setenv("CLEARML_VCS_REPO_URL", "file:///tests")
    # reporting from a thread, not a subprocess: closing the task does not wait ~12 s for the subprocess to flush
    config = tmp_path / "clearml.conf"
    config.write_text("sdk { development { report_use_subprocess: false } }\n")
    monkeypatch.setenv("CLEARML_CONFIG_FILE", str(config))
    folders: list[Path] = []

    class OfflineFolder(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folders.append(Path(_callback(trainer, "ClearMLCallback").task.get_offline_mode_folder()))

    args = args_factory(max_steps=3, report_to="clearml")
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(12), callbacks=[OfflineFolder()])
    trainer.train()
    (folder,) = folders
    assert _callback(trainer, "ClearMLCallback").task is None  # the task it created was closed
    assert folder.with_suffix(".zip").is_file()

    task = json.loads((folder / "task.json").read_text())
    assert task["project_name"] == "tiny" and task["name"] == "Trainer"
    assert task["hyperparams"]["Transformers"]["learning_rate"]["value"] == str(args.learning_rate)
    assert "n_embd = 16" in task["configuration"]["Model Configuration"]["value"]
    events = []
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        batch = json.loads(line)
        events += batch if isinstance(batch, list) else [batch]
    scalars = [(e["metric"], e["variant"], e.get("iter"), e["value"]) for e in events if "variant" in e]
    train_loss = [(it, v) for title, series, it, v in scalars if (title, series) == ("train", "loss")]
    assert_close([v for _, v in train_loss], [v for _, v in _logged(trainer, "loss")], rtol=1e-6, atol=0)
    assert any(title == "Summary" and series == "train_runtime" for title, series, _, _ in scalars)


@pytest.mark.parametrize(
    ("report_to", "variable", "value", "message"),
    [
        ("comet_ml", "COMET_MODE", "sometimes", "COMET_MODE='sometimes'.*get, get_or_create or create"),
        ("comet_ml", "COMET_LOG_ASSETS", "maybe", "COMET_LOG_ASSETS='maybe' is not understood; use one of true, false"),
        (
            "clearml",
            "CLEARML_LOG_MODEL",
            "maybe",
            "CLEARML_LOG_MODEL='maybe' is not understood; use one of true, false",
        ),
        ("dvclive", "HF_DVCLIVE_LOG_MODEL", "best", "HF_DVCLIVE_LOG_MODEL='best'.*true, false, all"),
    ],
)
def test_tracker_settings_are_checked_when_the_trainer_is_made(
    args_factory: Any, monkeypatch: pytest.MonkeyPatch, report_to: str, variable: str, value: str, message: str
) -> None:
    pytest.importorskip(report_to, reason=f"report_to={report_to!r} needs its library (requirements-test.txt)")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=message):
        Trainer(model=tiny_gpt2(), args=args_factory(report_to=report_to), train_dataset=lm_rows(4))

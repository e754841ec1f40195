"""Reporting integrations shipped with the trainer plugin, registered through ``register_callbacks``.

``report_to=["jsonl"]`` writes one JSON object per ``log`` call to ``<output_dir>/training_log.jsonl``;
``report_to=["tensorboard"]`` writes TensorBoard event files under ``<output_dir>/runs/<run_name>``
(needs the ``tensorboard`` package: ``pip install microformers-trainer[tensorboard]``);
``report_to=["mlflow"]`` logs parameters and metrics to MLflow (``pip install mlflow-skinny``);
``report_to=["wandb"]`` to Weights & Biases (``pip install wandb``; ``WANDB_MODE=offline`` works without network).
An integration is registered only when its library is installed; :func:`check_report_to` refuses other names.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from typing import Any

from microformers import ConfigError, PluginError

from .trainer_callback import TrainerCallback, TrainerControl, TrainerState

logger = logging.getLogger("microformers.trainer")

# the reference's integration names: what each needs here
_AVAILABLE_WITH = {
    "tensorboard": "pip install microformers-trainer[tensorboard]",
    "mlflow": "pip install mlflow-skinny (or mlflow)",
    "wandb": "pip install wandb",
}
_NOT_PROVIDED = (
    "azure_ml",
    "clearml",
    "codecarbon",
    "comet_ml",
    "dagshub",
    "dvclive",
    "flyte",
    "neptune",
    "swanlab",
    "trackio",
)


def check_report_to(names: list[str]) -> list[str]:
    """``TrainingArguments.report_to`` checked against the installed integrations (``"all"``: every one of
    them, as the reference; ``"none"``: none); a name nothing provides is a ``ConfigError`` saying why."""
    from microformers import registry

    if "none" in names:
        if len(names) > 1:
            raise ConfigError(f"TrainingArguments(report_to={names}): 'none' cannot be combined with other names")
        return ["none"]
    installed = sorted(registry.names("callbacks"))
    if "all" in names:
        return installed or ["none"]
    for name in names:
        if name in installed:
            continue
        if name in _AVAILABLE_WITH:
            raise ConfigError(
                f"TrainingArguments(report_to={name!r}): its library is not installed; {_AVAILABLE_WITH[name]}"
            )
        if name in _NOT_PROVIDED:
            raise ConfigError(
                f"TrainingArguments(report_to={name!r}): microformers-trainer has no {name} integration; install a "
                f"plugin that registers {name!r} through the register_callbacks hook (docs/training.md), or use one "
                f"of {', '.join(map(repr, installed)) or 'none installed'}"
            )
        raise ConfigError(
            f"TrainingArguments(report_to={name!r}): no installed plugin provides this integration; installed: "
            f"{', '.join(map(repr, installed)) or 'none'} (or 'all' / 'none')"
        )
    return names


def _run_parameters(args: Any, model: Any) -> dict[str, Any]:
    """The training arguments and the model's configuration, as one flat dict of parameters."""
    params = {}
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        params.update(config.to_dict())
    params.update(args.to_dict())
    return params


class JsonLinesCallback(TrainerCallback):
    """Appends ``{"step", "epoch", **logs}`` lines to ``training_log.jsonl`` (main process only)."""

    file_name = "training_log.jsonl"

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None

    def _write(self, args: Any, record: dict[str, Any]) -> None:
        path = self.path or os.path.join(args.output_dir, self.file_name)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    def on_log(self, args: Any, state: TrainerState, control: TrainerControl, logs: Any = None, **kw: Any) -> None:
        if state.is_world_process_zero and logs:
            self._write(args, {"step": state.global_step, "epoch": state.epoch, **logs})


class TensorBoardCallback(TrainerCallback):
    """Scalars of every ``log`` call, plus the training arguments as text, in TensorBoard event files."""

    def __init__(self, log_dir: str | os.PathLike[str] | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise PluginError(
                f"report_to='tensorboard' needs the tensorboard package ({exc}); "
                "install it with: pip install microformers-trainer[tensorboard]"
            ) from exc
        self._writer_cls = SummaryWriter
        self.log_dir = os.fspath(log_dir) if log_dir is not None else None
        self.writer: Any = None

    def _open(self, args: Any) -> None:
        if self.writer is None:
            run = args.run_name or f"{time.strftime('%b%d_%H-%M-%S')}_{socket.gethostname()}"
            self.writer = self._writer_cls(log_dir=self.log_dir or os.path.join(args.output_dir, "runs", run))

    def on_train_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._open(args)
            self.writer.add_text("args", args.to_json_string())

    def on_log(self, args: Any, state: TrainerState, control: TrainerControl, logs: Any = None, **kw: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        self._open(args)
        for key, value in logs.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                tag = key.replace("_", "/", 1) if key.startswith(("eval_", "test_")) else f"train/{key}"
                self.writer.add_scalar(tag, value, state.global_step)
        self.writer.flush()

    def on_train_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


_MLFLOW_VALUE_LIMIT = 250  # MLflow refuses longer parameter values
_MLFLOW_BATCH = 100  # parameters per log_params call (its batch limit)


def _true(name: str) -> bool:
    return os.environ.get(name, "false").lower() in ("1", "true", "yes", "on")


class MLflowCallback(TrainerCallback):
    """Logs to MLflow: on ``train`` begin the arguments and model configuration as parameters (values over
    250 characters left out, with a warning), then every ``log`` call's numbers as metrics at the global step.

    Environment, as the reference: ``MLFLOW_TRACKING_URI`` (e.g. a local ``file:`` folder), ``MLFLOW_EXPERIMENT_NAME``,
    ``MLFLOW_RUN_ID`` (continue that run), ``MLFLOW_NESTED_RUN``, ``MLFLOW_TAGS`` (a JSON object),
    ``MLFLOW_FLATTEN_PARAMS`` (nested dicts as ``a.b`` parameters) and ``HF_MLFLOW_LOG_ARTIFACTS`` (upload
    ``output_dir`` at the end). A run this callback started ends with training.
    """

    def __init__(self) -> None:
        try:
            import mlflow
        except ImportError as exc:
            raise PluginError(f"report_to='mlflow' needs MLflow ({exc}); {_AVAILABLE_WITH['mlflow']}") from exc
        self._ml = mlflow
        self._started = False
        self._ended_by_us = False

    def setup(self, args: Any, state: Any, model: Any) -> None:
        ml = self._ml
        if not state.is_world_process_zero:
            self._started = True
            return
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            ml.set_tracking_uri(uri)
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if experiment:
            ml.set_experiment(experiment)
        nested = _true("MLFLOW_NESTED_RUN")
        if ml.active_run() is None or nested:
            run_id = os.environ.get("MLFLOW_RUN_ID")
            ml.start_run(run_id=run_id, run_name=None if run_id else args.run_name, nested=nested)
            self._ended_by_us = True
        params = _run_parameters(args, model)
        if _true("MLFLOW_FLATTEN_PARAMS"):
            params = _flatten(params)
        for key, value in list(params.items()):
            if len(str(value)) > _MLFLOW_VALUE_LIMIT:
                logger.warning(
                    "mlflow: parameter %s left out, its value is longer than %d characters", key, _MLFLOW_VALUE_LIMIT
                )
                del params[key]
        items = list(params.items())
        for start in range(0, len(items), _MLFLOW_BATCH):
            ml.log_params(dict(items[start : start + _MLFLOW_BATCH]))
        tags = os.environ.get("MLFLOW_TAGS")
        if tags:
            try:
                ml.set_tags(json.loads(tags))
            except ValueError as exc:
                raise ConfigError(f"MLFLOW_TAGS must be a JSON object of tags ({exc})") from exc
        self._started = True

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not self._started:
            self.setup(args, state, model)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, model: Any = None, **kw: Any) -> None:
        if not self._started:
            self.setup(args, state, model)
        if not state.is_world_process_zero or not logs:
            return
        metrics = {}
        for key, value in logs.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                metrics[re.sub(r"[^0-9A-Za-z_\-. :/]", "_", key)] = value
            else:
                logger.warning("mlflow: %s=%r is not a number and is not logged as a metric", key, value)
        if metrics:
            self._ml.log_metrics(metrics, step=state.global_step, synchronous=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not (self._started and state.is_world_process_zero):
            return
        if _true("HF_MLFLOW_LOG_ARTIFACTS"):
            self._ml.log_artifacts(args.output_dir)
        if self._ended_by_us and self._ml.active_run() is not None:
            self._ml.end_run()
        self._started = self._ended_by_us = False


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


class WandbCallback(TrainerCallback):
    """Logs to Weights & Biases: a run (project ``WANDB_PROJECT``, default ``"huggingface"``; name ``run_name``)
    whose config holds the arguments and model configuration, and every ``log`` call as ``train/<name>``
    (``eval/<name>`` for evaluation metrics) against ``train/global_step``. ``WANDB_MODE=offline`` writes the
    run under ``WANDB_DIR`` for a later ``wandb sync``. ``WANDB_LOG_MODEL`` (uploading checkpoints) is refused:
    this integration does not upload models.
    """

    def __init__(self) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise PluginError(f"report_to='wandb' needs wandb ({exc}); {_AVAILABLE_WITH['wandb']}") from exc
        model_logging = os.environ.get("WANDB_LOG_MODEL", "false").lower()
        if model_logging not in ("false", "0", "no", "off", ""):
            raise ConfigError(
                f"WANDB_LOG_MODEL={model_logging!r}: uploading models to W&B is not supported by this integration; "
                "unset it (save with trainer.save_model and log the folder yourself)"
            )
        self._wandb = wandb
        self._initialized = False

    def setup(self, args: Any, state: Any, model: Any) -> None:
        self._initialized = True
        if not state.is_world_process_zero:
            return
        wandb = self._wandb
        config = _run_parameters(args, model)
        if wandb.run is None:
            wandb.init(project=os.environ.get("WANDB_PROJECT", "huggingface"), name=args.run_name)
        wandb.config.update(config, allow_val_change=True)
        wandb.define_metric("train/global_step")
        wandb.define_metric("*", step_metric="train/global_step", step_sync=True)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not self._initialized:
            self.setup(args, state, model)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, model: Any = None, **kw: Any) -> None:
        if not self._initialized:
            self.setup(args, state, model)
        if not state.is_world_process_zero or not logs:
            return
        record = {}
        for key, value in logs.items():
            if key.startswith(("eval_", "test_")):
                record[key.replace("_", "/", 1)] = value
            else:
                record[f"train/{key}"] = value
        self._wandb.log({**record, "train/global_step": state.global_step})

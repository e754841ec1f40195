"""Reporting integrations shipped with the trainer plugin, registered through ``register_callbacks``.

``report_to=["jsonl"]`` writes one JSON object per ``log`` call to ``<output_dir>/training_log.jsonl``;
``report_to=["tensorboard"]`` writes TensorBoard event files under ``<output_dir>/runs/<run_name>``
(needs the ``tensorboard`` package: ``pip install microformers-trainer[tensorboard]``);
``report_to=["mlflow"]`` logs parameters and metrics to MLflow (``pip install mlflow-skinny``);
``report_to=["wandb"]`` to Weights & Biases (``pip install wandb``; ``WANDB_MODE=offline`` works without network).
``report_to=["dvclive"]``, ``["codecarbon"]``, ``["comet_ml"]`` and ``["clearml"]`` to DVCLive, CodeCarbon,
Comet and ClearML (each offline as its library allows: see each class).
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
    "dvclive": "pip install dvclive",
    "codecarbon": "pip install codecarbon",
    "comet_ml": "pip install comet-ml",
    "clearml": "pip install clearml",
}
_NOT_PROVIDED = (
    "azure_ml",
    "dagshub",
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


class _TrackerCallback(TrainerCallback):
    """An integration whose run starts once (:meth:`setup`), when training begins or at the first call before it
    that needs the run (a ``log`` outside ``train``)."""

    _initialized = False

    def setup(self, args: Any, state: Any, model: Any) -> None:
        raise NotImplementedError

    def _ensure_setup(self, args: Any, state: Any, model: Any) -> None:
        if not self._initialized:
            self.setup(args, state, model)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._ensure_setup(args, state, model)


class MLflowCallback(_TrackerCallback):
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
        self._initialized = False
        self._ended_by_us = False

    def setup(self, args: Any, state: Any, model: Any) -> None:
        ml = self._ml
        if not state.is_world_process_zero:
            self._initialized = True
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
        self._initialized = True

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, model: Any = None, **kw: Any) -> None:
        self._ensure_setup(args, state, model)
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
        if not (self._initialized and state.is_world_process_zero):
            return
        if _true("HF_MLFLOW_LOG_ARTIFACTS"):
            self._ml.log_artifacts(args.output_dir)
        if self._ended_by_us and self._ml.active_run() is not None:
            self._ml.end_run()
        self._initialized = self._ended_by_us = False


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


class WandbCallback(_TrackerCallback):
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

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, model: Any = None, **kw: Any) -> None:
        self._ensure_setup(args, state, model)
        if not state.is_world_process_zero or not logs:
            return
        record = {}
        for key, value in logs.items():
            if key.startswith(("eval_", "test_")):
                record[key.replace("_", "/", 1)] = value
            else:
                record[f"train/{key}"] = value
        self._wandb.log({**record, "train/global_step": state.global_step})


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _prefixed(logs: dict[str, Any]) -> dict[str, Any]:
    """``eval_x`` → ``eval/x``, ``test_x`` → ``test/x``, anything else → ``train/x`` (the reference's naming)."""
    out = {}
    for key, value in logs.items():
        if key.startswith(("eval_", "test_")):
            out[key.replace("_", "/", 1)] = value
        else:
            out[f"train/{key}"] = value
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _env_choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    """The lower-cased value of environment variable ``name``; a value outside ``allowed`` is a ``ConfigError``."""
    value = os.environ.get(name, default).strip().lower()
    if value in _TRUE:
        return "true"
    if value in _FALSE:
        return "false"
    if value not in allowed:
        raise ConfigError(
            f"{name}={value!r} is not understood; use one of true, false{''.join(', ' + a for a in allowed)}"
        )
    return value


class DVCLiveCallback(_TrackerCallback):
    """Logs to DVCLive (``pip install dvclive``), which writes plain files: on ``train`` begin the arguments
    as ``params.yaml``, every ``log`` call's numbers as metrics (``eval_loss`` as ``eval/loss``) followed by
    ``Live.next_step()`` (so ``plots/metrics/<name>.tsv`` hold one row per log call and ``metrics.json`` the
    latest values), and ``Live.end()`` when training ends. The ``Live`` is made with DVCLive's defaults
    (folder ``dvclive/`` in the working directory) unless one is given.

    ``log_model`` (or ``HF_DVCLIVE_LOG_MODEL``): ``True`` saves the final model (and processing class) to
    ``<output_dir>/last`` (``best`` with ``load_best_model_at_end``) and logs it with ``Live.log_artifact``;
    ``"all"`` logs ``output_dir`` at every save. DVCLive logs artifacts only inside a DVC repository (it warns
    and skips otherwise).
    """

    def __init__(self, live: Any = None, log_model: bool | str | None = None) -> None:
        try:
            from dvclive import Live
        except ImportError as exc:
            raise PluginError(f"report_to='dvclive' needs DVCLive ({exc}); {_AVAILABLE_WITH['dvclive']}") from exc
        if live is not None and not isinstance(live, Live):
            raise ConfigError(f"DVCLiveCallback(live=...) must be a dvclive.Live, got {type(live).__name__}")
        if log_model is None:
            choice = _env_choice("HF_DVCLIVE_LOG_MODEL", "false", ("all",))
            log_model = "all" if choice == "all" else choice == "true"
        elif log_model not in (True, False, "all"):
            raise ConfigError(f"DVCLiveCallback(log_model={log_model!r}): use True, False or 'all'")
        self.live = live
        self._log_model = log_model
        self._initialized = False

    def setup(self, args: Any, state: Any, model: Any) -> None:
        from dvclive import Live

        self._initialized = True
        if state.is_world_process_zero:
            if self.live is None:
                self.live = Live()
            self.live.log_params(args.to_dict())

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, model: Any = None, **kw: Any) -> None:
        self._ensure_setup(args, state, model)
        if not state.is_world_process_zero or not logs:
            return
        from dvclive.utils import standardize_metric_name

        for key, value in logs.items():
            if _is_number(value):
                self.live.log_metric(standardize_metric_name(key, "dvclive.huggingface"), value)
            else:
                logger.warning("dvclive: %s=%r is not a number and is not logged as a metric", key, value)
        self.live.next_step()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._log_model == "all" and self._initialized and state.is_world_process_zero:
            self.live.log_artifact(args.output_dir)

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not (self._initialized and state.is_world_process_zero):
            return
        if self._log_model is True and model is not None:
            name = "best" if args.load_best_model_at_end else "last"
            folder = os.path.join(args.output_dir, name)
            model.save_pretrained(folder)
            processing_class = kwargs.get("processing_class")
            if processing_class is not None and hasattr(processing_class, "save_pretrained"):
                processing_class.save_pretrained(folder)
            self.live.log_artifact(folder, name=name, type="model", copy=True)
        self.live.end()
        self._initialized = False


class CodeCarbonCallback(TrainerCallback):
    """Measures the training's energy use and CO₂ emissions with CodeCarbon (``pip install codecarbon``): a
    tracker started when training begins and stopped when it ends, writing ``<output_dir>/emissions.csv``
    (local process zero of each machine). CodeCarbon's own configuration applies (``CODECARBON_*``
    environment variables, ``.codecarbon.config``). With a country set (``CODECARBON_COUNTRY_ISO_CODE``, e.g.
    ``FRA``) the offline tracker is used and nothing goes to the network; without one CodeCarbon looks the
    location up online. The tracker is made when training begins (the reference makes it with the Trainer).
    """

    def __init__(self) -> None:
        try:
            import codecarbon
        except ImportError as exc:
            raise PluginError(
                f"report_to='codecarbon' needs CodeCarbon ({exc}); {_AVAILABLE_WITH['codecarbon']}"
            ) from exc
        self._codecarbon = codecarbon
        self.tracker: Any = None

    def _offline(self) -> bool:
        if os.environ.get("CODECARBON_COUNTRY_ISO_CODE"):
            return True
        from codecarbon.core.config import get_hierarchical_config

        return bool(get_hierarchical_config().get("country_iso_code"))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_local_process_zero:
            return
        if self.tracker is None:
            os.makedirs(args.output_dir, exist_ok=True)
            cc = self._codecarbon
            tracker_cls = cc.OfflineEmissionsTracker if self._offline() else cc.EmissionsTracker
            self.tracker = tracker_cls(output_dir=args.output_dir)
        self.tracker.start()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracker is not None and state.is_local_process_zero:
            self.tracker.stop()


class CometCallback(_TrackerCallback):
    """Logs to Comet (``pip install comet-ml``): on ``train`` begin an experiment from ``comet_ml.start``
    (named ``run_name``; ``COMET_MODE`` ``get``/``create``/``get_or_create`` as the reference, project
    ``COMET_PROJECT_NAME``) with the model graph, the arguments as ``args|*`` and the model configuration as
    ``config|*`` parameters; every ``log`` call's numbers as ``train/*``/``eval/*`` metrics at the global step
    and epoch; ``predict`` metrics too; with ``COMET_LOG_ASSETS=true`` the ``output_dir`` as an asset folder
    when training ends. The experiment stays open after training, as the reference (``callback.experiment``;
    Comet ends it at exit). Offline: ``COMET_START_ONLINE=false`` (with ``COMET_OFFLINE_DIRECTORY``) writes the
    experiment as a zip for a later ``comet upload``.
    """

    def __init__(self) -> None:
        try:
            import comet_ml
        except ImportError as exc:
            raise PluginError(f"report_to='comet_ml' needs Comet ({exc}); {_AVAILABLE_WITH['comet_ml']}") from exc
        self._comet = comet_ml
        self._initialized = False
        self._log_assets = _env_choice("COMET_LOG_ASSETS", "false", ()) == "true"
        mode = os.environ.get("COMET_MODE")
        if mode is not None and mode.lower() not in ("get", "get_or_create", "create"):
            raise ConfigError(f"COMET_MODE={mode!r} is not understood; use get, get_or_create or create")
        self._mode = mode.lower() if mode else None
        self.experiment: Any = None

    def setup(self, args: Any, state: Any, model: Any) -> None:
        self._initialized = True
        if not state.is_world_process_zero:
            return
        mode = "create" if getattr(state, "is_hyper_param_search", False) else self._mode  # one experiment per trial
        comet = self._comet
        self.experiment = comet.start(mode=mode, experiment_config=comet.ExperimentConfig(name=args.run_name))
        if model is not None:
            self.experiment.__internal_api__set_model_graph__(model, framework="transformers")
        params: dict[str, Any] = {"args": args.to_dict()}
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            params["config"] = config.to_dict()
        self.experiment.__internal_api__log_parameters__(
            params, framework="transformers", source="manual", flatten_nested=True
        )
        if getattr(state, "is_hyper_param_search", False):
            self.experiment.log_optimization(
                optimization_id=getattr(state, "trial_name", None), parameters=getattr(state, "trial_params", None)
            )

    def _log(self, state: Any, logs: Any) -> None:
        if state.is_world_process_zero and self.experiment is not None and logs:
            self.experiment.__internal_api__log_metrics__(
                _prefixed(logs), step=state.global_step, epoch=state.epoch, framework="transformers"
            )

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, model: Any = None, **kw: Any) -> None:
        self._ensure_setup(args, state, model)
        self._log(state, logs)

    def on_predict(self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any) -> None:
        self._ensure_setup(args, state, None)
        self._log(state, metrics)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not (self._initialized and state.is_world_process_zero and self.experiment is not None):
            return
        if self._log_assets:
            self.experiment.log_asset_folder(
                args.output_dir, recursive=True, log_file_name=True, step=state.global_step
            )
        if getattr(state, "is_hyper_param_search", False):
            self.experiment.clean()
            self._initialized = False


_CLEARML_SINGLE_VALUES = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "total_flos",
    "epoch",
)


class ClearMLCallback(_TrackerCallback):
    """Logs to ClearML (``pip install clearml``): on ``train`` begin the running task (``Task.current_task()``)
    or a new one (project ``CLEARML_PROJECT``, default ``"HuggingFace Transformers"``; name ``CLEARML_TASK``,
    default ``"Trainer"``), the arguments as hyperparameters of section ``Transformers`` (``*_token`` ones left
    out) and the model configuration as configuration object ``Model Configuration``; every ``log`` call's
    numbers as scalars (title ``train``/``eval``/``test``, series the name, at the global step; the end-of-training
    summary numbers as single values). ``CLEARML_LOG_MODEL`` (default true for a task this callback created,
    false for one it found) uploads every saved checkpoint as an output model, keeping ``save_total_limit``
    of them. A task this callback created is closed when training ends. Offline: ``CLEARML_OFFLINE_MODE=1``
    (or ``Task.set_offline(True)``) stores the session as a folder and zip for a later import.
    """

    _hparams_section = "Transformers"
    _model_config_section = "Model Configuration"

    def __init__(self) -> None:
        try:
            import clearml
        except ImportError as exc:
            raise PluginError(f"report_to='clearml' needs ClearML ({exc}); {_AVAILABLE_WITH['clearml']}") from exc
        self._clearml = clearml
        self._log_model_env = _env_choice("CLEARML_LOG_MODEL", "", ())  # "false" when unset
        self._log_model_set = os.environ.get("CLEARML_LOG_MODEL", "").strip() != ""
        self._initialized = False
        self._close_on_end = False
        self._log_model = False
        self._checkpoints: list[Any] = []
        self.task: Any = None

    def setup(self, args: Any, state: Any, model: Any) -> None:
        self._initialized = True
        if not state.is_world_process_zero:
            return
        task_cls = self._clearml.Task
        if _true("CLEARML_OFFLINE_MODE") and not task_cls.is_offline():
            task_cls.set_offline(True)  # ClearML reads the variable once, when imported
        if self.task is None:
            current = task_cls.current_task()
            if current is not None:
                self.task, self._close_on_end = current, False
            else:
                self.task = task_cls.init(
                    project_name=os.environ.get("CLEARML_PROJECT", "HuggingFace Transformers"),
                    task_name=os.environ.get("CLEARML_TASK", "Trainer"),
                    auto_connect_frameworks={"tensorboard": False, "pytorch": False},
                    output_uri=True,
                )
                self._close_on_end = True
            default = not self._log_model_set and self._close_on_end  # the reference's default
            self._log_model = default or self._log_model_env == "true"
        hparams = {k: v for k, v in _flatten(args.to_dict()).items() if not k.endswith("_token")}
        self.task.set_parameters({f"{self._hparams_section}/{k}": v for k, v in hparams.items()})
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            self.task.set_configuration_object(
                name=self._model_config_section,
                config_dict=config.to_dict(),
                description="The configuration of the model trained.",
            )

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._checkpoints = []
        if getattr(state, "is_hyper_param_search", False):
            self._initialized = False
        self._ensure_setup(args, state, model)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, model: Any = None, **kw: Any) -> None:
        self._ensure_setup(args, state, model)
        if not state.is_world_process_zero or not logs or self.task is None:
            return
        report = self.task.get_logger()
        for key, value in logs.items():
            if not _is_number(value):
                logger.warning("clearml: %s=%r is not a number and is not reported as a scalar", key, value)
            elif key in _CLEARML_SINGLE_VALUES:
                report.report_single_value(name=key, value=value)
            elif key.startswith(("eval_", "test_")):
                title, series = key.split("_", 1)
                report.report_scalar(title=title, series=series, value=value, iteration=state.global_step)
            else:
                report.report_scalar(title="train", series=key, value=value, iteration=state.global_step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not (self._log_model and self.task is not None and state.is_world_process_zero):
            return
        name = f"checkpoint-{state.global_step}"
        output_model = self._clearml.OutputModel(task=self.task, name=name)
        output_model.update_weights_package(
            weights_path=os.path.join(args.output_dir, name),
            target_filename=name,
            iteration=state.global_step,
            auto_delete_file=False,
        )
        self._checkpoints.append(output_model)
        while args.save_total_limit and len(self._checkpoints) > args.save_total_limit:
            oldest = self._checkpoints.pop(0)
            if not self._clearml.Model.remove(oldest, delete_weights_file=True, force=True):
                logger.warning("clearml: could not remove checkpoint %s beyond save_total_limit", oldest.name)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._close_on_end and self.task is not None and state.is_world_process_zero:
            self.task.close()
            self.task = None
            self._initialized = False

"""Trainer state, control flags and callbacks (the events of the reference Trainer, same names and order)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import attrs

from microformers import ConfigError

EVENTS = (
    "on_init_end",
    "on_train_begin",
    "on_epoch_begin",
    "on_step_begin",
    "on_substep_end",
    "on_pre_optimizer_step",
    "on_optimizer_step",
    "on_step_end",
    "on_evaluate",
    "on_predict",
    "on_save",
    "on_log",
    "on_prediction_step",
    "on_epoch_end",
    "on_train_end",
)


@attrs.define(slots=False)
class TrainerState:
    """Where training stands; saved as ``trainer_state.json`` in every checkpoint."""

    epoch: float | None = None
    global_step: int = 0
    max_steps: int = 0
    logging_steps: float = 500
    eval_steps: float | None = 500
    save_steps: float = 500
    train_batch_size: int | None = None
    num_train_epochs: int = 0
    num_input_tokens_seen: int = 0
    total_flos: float = 0
    log_history: list[dict[str, float]] = attrs.field(factory=list)
    best_metric: float | None = None
    best_global_step: int | None = None
    best_model_checkpoint: str | None = None
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    stateful_callbacks: dict[str, Any] = attrs.field(factory=dict)

    def compute_steps(self, args: Any, max_steps: int) -> None:
        """Turn ratio-valued ``logging/eval/save_steps`` (below 1) into step counts for this run."""
        for kind in ("logging", "eval", "save"):
            value = getattr(args, f"{kind}_steps")
            if value is not None:
                setattr(self, f"{kind}_steps", math.ceil(max_steps * value) if value < 1 else int(value))

    def to_json_string(self) -> str:
        return json.dumps(attrs.asdict(self), indent=2, sort_keys=True) + "\n"

    def save_to_json(self, json_path: str | os.PathLike[str]) -> None:
        with open(json_path, "w", encoding="utf-8") as f:
            f.write(self.to_json_string())

    @classmethod
    def load_from_json(cls, json_path: str | os.PathLike[str]) -> TrainerState:
        """The state saved in ``json_path``; a ``CheckpointError`` naming the file when it does not hold one."""
        from pathlib import Path

        from .checkpointing import load_trainer_state

        return load_trainer_state(Path(json_path))


@attrs.define(slots=False)
class TrainerControl:
    """Flags callbacks set to steer the loop; the Trainer resets them once acted upon."""

    should_training_stop: bool = False
    should_epoch_stop: bool = False
    should_save: bool = False
    should_evaluate: bool = False
    should_log: bool = False


# flags the handler clears before an event runs (the flag has been acted upon, or a new period starts)
_RESETS: dict[str, tuple[str, ...]] = {
    "on_train_begin": ("should_training_stop",),
    "on_epoch_begin": ("should_epoch_stop",),
    "on_step_begin": ("should_log", "should_evaluate", "should_save"),
    "on_log": ("should_log",),
    "on_evaluate": ("should_evaluate",),
    "on_save": ("should_save",),
}


class TrainerCallback:
    """Base class: override any event. Each gets ``(args, state, control, **kwargs)`` where kwargs hold
    ``model``, ``optimizer``, ``lr_scheduler``, ``train_dataloader``, ``eval_dataloader``, ``processing_class``
    and, per event, ``metrics`` (on_evaluate/on_predict) or ``logs`` (on_log). Returning a ``TrainerControl``
    replaces the control flags; returning ``None`` keeps them.
    """

    def on_init_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_train_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_epoch_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_step_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_substep_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_pre_optimizer_step(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_optimizer_step(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_evaluate(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_predict(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_save(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_log(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_prediction_step(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_epoch_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass

    def on_train_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        pass


class CallbackHandler(TrainerCallback):
    """Calls every callback, in order, for each event."""

    def __init__(self, callbacks: list[Any], model: Any, processing_class: Any, optimizer: Any, lr_scheduler: Any):
        self.callbacks: list[TrainerCallback] = []
        for cb in callbacks:
            self.add_callback(cb)
        self.model = model
        self.processing_class = processing_class
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.train_dataloader: Any = None
        self.eval_dataloader: Any = None

    def add_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> None:
        cb = callback() if isinstance(callback, type) else callback
        if not isinstance(cb, TrainerCallback) and not all(callable(getattr(cb, e, None)) for e in EVENTS):
            raise ConfigError(f"callback {cb!r} is not a TrainerCallback (subclass microformers.TrainerCallback)")
        self.callbacks.append(cb)

    def pop_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> TrainerCallback | None:
        for cb in self.callbacks:
            if cb is callback or (isinstance(callback, type) and isinstance(cb, callback)):
                self.callbacks.remove(cb)
                return cb
        return None

    def remove_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> None:
        self.pop_callback(callback)

    @property
    def callback_list(self) -> str:
        return "\n".join(type(cb).__name__ for cb in self.callbacks)

    def call_event(self, event: str, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        for flag in _RESETS.get(event, ()):
            setattr(control, flag, False)
        for cb in self.callbacks:
            result = getattr(cb, event)(
                args,
                state,
                control,
                model=self.model,
                processing_class=self.processing_class,
                optimizer=self.optimizer,
                lr_scheduler=self.lr_scheduler,
                train_dataloader=self.train_dataloader,
                eval_dataloader=self.eval_dataloader,
                **kwargs,
            )
            if result is not None:
                control = result
        return control

    def __getattribute__(self, name: str) -> Any:
        if name in EVENTS:
            return lambda args, state, control, **kw: self.call_event(name, args, state, control, **kw)
        return super().__getattribute__(name)


class DefaultFlowCallback(TrainerCallback):
    """Decides when to log, evaluate, save and stop, from the strategies in ``TrainingArguments``."""

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> TrainerControl:
        step = state.global_step
        if step == 1 and args.logging_first_step:
            control.should_log = True
        if args.logging_strategy == "steps" and step % state.logging_steps == 0:
            control.should_log = True
        eval_due = args.eval_strategy == "steps" and args.eval_delay <= step
        if eval_due and step % state.eval_steps == 0:
            control.should_evaluate = True
        if args.save_strategy == "steps" and state.save_steps > 0 and step % state.save_steps == 0:
            control.should_save = True
        if step >= state.max_steps:
            control.should_training_stop = True
            if eval_due and step % state.eval_steps != 0:
                control.should_evaluate = True
            if args.save_strategy == "steps":
                control.should_save = True
        return control

    def on_epoch_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> TrainerControl:
        if args.logging_strategy == "epoch":
            control.should_log = True
        if args.eval_strategy == "epoch" and args.eval_delay <= (state.epoch or 0):
            control.should_evaluate = True
        if args.save_strategy == "epoch":
            control.should_save = True
        return control


class ProgressCallback(TrainerCallback):
    """tqdm bars for training (with the latest loss) and evaluation, on the main process only."""

    def __init__(self) -> None:
        self.training_bar: Any = None
        self.prediction_bar: Any = None
        self.current_step = 0

    def on_train_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.training_bar = tqdm(total=state.max_steps, dynamic_ncols=True, initial=state.global_step)
        self.current_step = state.global_step

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.training_bar is not None:
            self.training_bar.update(state.global_step - self.current_step)
        self.current_step = state.global_step

    def on_prediction_step(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        loader = kwargs.get("eval_dataloader")
        if not state.is_world_process_zero or loader is None or not hasattr(loader, "__len__"):
            return
        if self.prediction_bar is None:
            from tqdm.auto import tqdm

            self.prediction_bar = tqdm(total=len(loader), leave=self.training_bar is None, dynamic_ncols=True)
        self.prediction_bar.update(1)

    def _close_prediction(self) -> None:
        if self.prediction_bar is not None:
            self.prediction_bar.close()
        self.prediction_bar = None

    def on_evaluate(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._close_prediction()

    def on_predict(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._close_prediction()

    def on_log(self, args: Any, state: TrainerState, control: TrainerControl, logs: Any = None, **kw: Any) -> None:
        if self.training_bar is not None and logs:
            shown = _readable(logs)
            if "loss" in shown:
                self.training_bar.set_postfix(loss=shown["loss"], refresh=False)
            self.training_bar.write(str(shown))

    def on_train_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.training_bar is not None:
            self.training_bar.close()
            self.training_bar = None


def _readable(logs: dict[str, Any]) -> dict[str, Any]:
    """Logs as printed: floats to 4 significant digits (a learning rate of 3e-05 stays 3e-05), no FLOP count."""
    return {k: f"{v:.4g}" if isinstance(v, float) else v for k, v in logs.items() if k != "total_flos"}


class PrinterCallback(TrainerCallback):
    """Prints the logs (used instead of the progress bars when ``disable_tqdm=True``)."""

    def on_log(self, args: Any, state: TrainerState, control: TrainerControl, logs: Any = None, **kw: Any) -> None:
        if state.is_local_process_zero and logs:
            print(_readable(logs))


class EarlyStoppingCallback(TrainerCallback):
    """Stop when ``metric_for_best_model`` has not improved (by more than ``early_stopping_threshold``)
    for ``early_stopping_patience`` evaluations. Needs ``load_best_model_at_end`` or ``metric_for_best_model``."""

    def __init__(self, early_stopping_patience: int = 1, early_stopping_threshold: float = 0.0) -> None:
        self.early_stopping_patience = early_stopping_patience
        self.early_stopping_threshold = early_stopping_threshold
        self.early_stopping_patience_counter = 0

    def on_train_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if args.metric_for_best_model is None:
            raise ConfigError("EarlyStoppingCallback needs TrainingArguments(metric_for_best_model=...)")
        if args.eval_strategy == "no":
            raise ConfigError("EarlyStoppingCallback needs an eval_strategy of 'steps' or 'epoch'")

    def on_evaluate(self, args: Any, state: TrainerState, control: TrainerControl, metrics: Any = None, **kw: Any):
        name = args.metric_for_best_model
        key = name if name.startswith("eval_") else f"eval_{name}"
        value = (metrics or {}).get(key)
        if value is None:
            raise ConfigError(
                f"EarlyStoppingCallback: metric {key!r} is not among the evaluation metrics {sorted(metrics or {})}"
            )
        better = (lambda a, b: a > b) if args.greater_is_better else (lambda a, b: a < b)
        if state.best_metric is None or (
            better(value, state.best_metric) and abs(value - state.best_metric) > self.early_stopping_threshold
        ):
            self.early_stopping_patience_counter = 0
        else:
            self.early_stopping_patience_counter += 1
        if self.early_stopping_patience_counter >= self.early_stopping_patience:
            control.should_training_stop = True
        return control

"""Reporting integrations shipped with the trainer plugin, registered through ``register_callbacks``.

``report_to=["jsonl"]`` writes one JSON object per ``log`` call to ``<output_dir>/training_log.jsonl``;
``report_to=["tensorboard"]`` writes TensorBoard event files under ``<output_dir>/runs/<run_name>``
(needs the ``tensorboard`` package: ``pip install microformers-trainer[tensorboard]``).
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from microformers import PluginError

from .trainer_callback import TrainerCallback, TrainerControl, TrainerState


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

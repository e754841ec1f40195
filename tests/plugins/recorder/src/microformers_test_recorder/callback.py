"""A third-party integration: writes the name of every event to ``<output_dir>/recorder-events.txt``."""

from __future__ import annotations

import os
from typing import Any

from microformers import TrainerCallback
from microformers_trainer.trainer_callback import EVENTS


def _recorder(event: str) -> Any:
    def handler(self: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        os.makedirs(args.output_dir, exist_ok=True)
        with open(os.path.join(args.output_dir, "recorder-events.txt"), "a", encoding="utf-8") as f:
            f.write(f"{event} {state.global_step}\n")

    return handler


RecorderCallback = type("RecorderCallback", (TrainerCallback,), {event: _recorder(event) for event in EVENTS})

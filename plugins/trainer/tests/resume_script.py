"""Run by test_checkpoints.py in a subprocess: train a tiny GPT-2 with dropout and shuffling, saving every
4 steps; with ``--kill-at N`` the process SIGKILLs itself right after checkpoint N is written."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from trainer_helpers import lm_rows, tiny_gpt2

from microformers import Trainer, TrainerCallback, TrainingArguments


class KillAfterSave(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def make_trainer(output_dir: str, callbacks: list[Any] | None = None) -> Trainer:
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_train_epochs=3,
        learning_rate=1e-2,
        warmup_steps=2,
        weight_decay=0.1,
        logging_steps=1,
        save_steps=4,
        disable_tqdm=True,
        seed=11,
    )
    model = tiny_gpt2(resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    return Trainer(model=model, args=args, train_dataset=lm_rows(40), callbacks=callbacks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("--kill-at", type=int, required=True)
    ns = parser.parse_args()
    make_trainer(ns.output_dir, [KillAfterSave(ns.kill_at)]).train()
    sys.exit(3)  # not reached: the process kills itself

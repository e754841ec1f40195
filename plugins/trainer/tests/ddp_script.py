"""Run by test_distributed.py under ``torchrun --nproc_per_node 2``: the same training script as one process,
with the per-device batch halved. Rank 0 saves the final weights to ``<output_dir>/final``.

With a third argument ``dropout``, the same process group then trains with dropout and a different seed per
rank three times: uninterrupted (``<output_dir>/dropout-full``), stopped right after checkpoint 3
(``dropout-stopped``), and resumed from that checkpoint (``dropout-resumed``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from trainer_helpers import lm_rows, tiny_gpt2

from microformers import Trainer, TrainerCallback, TrainingArguments
from microformers_sdk.testing.distributed import finish_distributed_script, start_rank_diagnostics


def make_trainer(output_dir: str, batch_size: int) -> Trainer:
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        learning_rate=1e-3,  # AdamW: the update size does not shrink with the tiny summation-order differences
        weight_decay=0.1,
        max_grad_norm=0.5,
        logging_steps=1,
        save_strategy="no",
        report_to="jsonl",
        disable_tqdm=True,
        seed=5,
    )
    model = tiny_gpt2(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    rows = lm_rows(32)
    for i, row in enumerate(rows):  # uneven label counts: the loss is normalised over both processes' tokens
        row["labels"] = [-100] * (i % 3) + row["labels"][i % 3 :]
    return Trainer(model=model, args=args, train_dataset=rows)


class SeedPerRank(TrainerCallback):
    """Each rank its own generator stream (a resumed run's first update restores the checkpoint's instead)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        torch.manual_seed(1000 + args.process_index)


class StopAfterSave(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def dropout_trainer(output_dir: str, stop_at: int | None = None) -> Trainer:
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        num_train_epochs=2,
        learning_rate=1e-2,
        save_steps=3,
        report_to="none",
        disable_tqdm=True,
        seed=7,
    )
    model = tiny_gpt2(resid_pdrop=0.2, embd_pdrop=0.2, attn_pdrop=0.2)
    callbacks = [SeedPerRank(), *([StopAfterSave(stop_at)] if stop_at else [])]
    return Trainer(model=model, args=args, train_dataset=lm_rows(24), callbacks=callbacks)


def dropout_runs(output_dir: str) -> None:
    root = Path(output_dir)
    full = dropout_trainer(str(root / "dropout-full"))
    full.train()
    full.save_model(str(root / "dropout-full" / "final"))
    dropout_trainer(str(root / "dropout-stopped"), stop_at=3).train()
    resumed = dropout_trainer(str(root / "dropout-stopped"))
    resumed.train(resume_from_checkpoint=str(root / "dropout-stopped" / "checkpoint-3"))
    resumed.save_model(str(root / "dropout-resumed"))


def main(output_dir: str, batch_size: int) -> Any:
    trainer = make_trainer(output_dir, batch_size)
    trainer.train()
    trainer.save_model(str(Path(output_dir) / "final"))
    return trainer


if __name__ == "__main__":
    start_rank_diagnostics(sys.argv[1])
    torch.set_num_threads(1)
    main(sys.argv[1], int(sys.argv[2]))
    if sys.argv[3:] == ["dropout"]:
        dropout_runs(sys.argv[1])
    finish_distributed_script()

"""Run by test_distributed.py under ``torchrun --nproc_per_node 2``: the same training script as one process,
with the per-device batch halved. Rank 0 saves the final weights to ``<output_dir>/final``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from trainer_helpers import lm_rows, tiny_gpt2

from microformers import Trainer, TrainingArguments


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


def main(output_dir: str, batch_size: int) -> Any:
    trainer = make_trainer(output_dir, batch_size)
    trainer.train()
    trainer.save_model(str(Path(output_dir) / "final"))
    return trainer


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    main(sys.argv[1], int(sys.argv[2]))
    torch.distributed.destroy_process_group()

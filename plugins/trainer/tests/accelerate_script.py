"""Run by test_accelerate.py.

``accelerate launch --multi_gpu --num_processes 2 accelerate_script.py OUT 2``: accelerate's documented loop
(``Accelerator().prepare(model, optimizer, dataloader, scheduler)``, ``accelerator.backward``) trains a tiny llama
on 2 CPU processes; rank 0 writes the final weights to ``OUT/accelerate``. Called in one process (``main``) with
batch 4, it is the run the test compares against.

``python accelerate_script.py OUT --trainer-without-accelerate``: ``import accelerate`` is made to fail, then a
``Trainer`` run writes its weights and logged losses to ``OUT``.
"""

from __future__ import annotations

import importlib.abc
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from trainer_helpers import lm_rows, tiny_llama

from microformers_sdk.testing.distributed import finish_distributed_script, start_rank_diagnostics

ROWS = 16  # 4 batches of 4 for one process, 4 batches of 2 for each of two


def main(output_dir: str, batch_size: int) -> dict[str, torch.Tensor]:
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    from microformers import default_data_collator, get_constant_schedule

    accelerator = Accelerator(cpu=True)
    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    # constant: a prepared scheduler advances once per process at each step (accelerate's rule for the larger
    # total batch), so a decaying schedule would differ between 2 processes x batch 2 and 1 process x batch 4
    scheduler = get_constant_schedule(optimizer)
    loader = DataLoader(lm_rows(ROWS), batch_size=batch_size, collate_fn=default_data_collator)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    model.train()
    rows_seen = []
    for _epoch in range(2):
        for batch in loader:
            rows_seen.append(int(batch["input_ids"].shape[0]))
            optimizer.zero_grad()
            outputs = model(**batch)
            accelerator.backward(outputs.loss)
            optimizer.step()
            scheduler.step()
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(Path(output_dir) / "accelerate", is_main_process=accelerator.is_main_process)
    seen = {"num_processes": accelerator.num_processes, "backend": str(accelerator.state.backend), "rows": rows_seen}
    (Path(output_dir) / f"rank{accelerator.process_index}.json").write_text(json.dumps(seen))
    accelerator.wait_for_everyone()
    return {k: v.detach().clone() for k, v in unwrapped.state_dict().items()}


class _HideAccelerate(importlib.abc.MetaPathFinder):
    """``import accelerate`` (and its submodules) fails as if it were not installed; the attempts are kept."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name == "accelerate" or name.startswith("accelerate."):
            self.attempts.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
        return None


def trainer_run(output_dir: str) -> Any:
    """A short Trainer run; its final weights (``model.safetensors``) and losses (``losses.json``) in ``output_dir``."""
    from microformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        max_steps=4,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        seed=3,
    )
    trainer = Trainer(model=tiny_llama(), args=args, train_dataset=lm_rows(ROWS))
    trainer.train()
    trainer.save_model(output_dir)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    (Path(output_dir) / "losses.json").write_text(json.dumps(losses))
    return trainer


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[2] == "--trainer-without-accelerate":
        hider = _HideAccelerate()
        sys.meta_path.insert(0, hider)
        trainer_run(sys.argv[1])
        loaded = sorted(n for n in sys.modules if n == "accelerate" or n.startswith("accelerate."))
        report = {"loaded": loaded, "attempts": hider.attempts}
        (Path(sys.argv[1]) / "accelerate_modules.json").write_text(json.dumps(report))
    else:
        start_rank_diagnostics(sys.argv[1])
        main(sys.argv[1], int(sys.argv[2]))
        finish_distributed_script()

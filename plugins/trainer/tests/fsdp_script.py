"""Run by test_fsdp.py under ``torchrun --nproc_per_node 2`` (gloo on CPU): a tiny llama trained with
``fsdp="full_shard"`` (final weights in ``<output_dir>/full_shard``), with ``fsdp="shard_grad_op"``
(``shard_grad_op``), and stopped after checkpoint 2 (``stopped``) then resumed from it (``resumed``); the same
with sharded ``torch.distributed.checkpoint`` checkpoints (``sharded/``), where saving checkpoint 4 first fails
in one process's shard write (``sharded/failure_rank<N>.txt``, ``sharded/before_failure.json``) and a second
resume from checkpoint 2 ends the run (``resumed_sharded``).
Called in one process without fsdp it is the reference run the test compares against."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from trainer_helpers import lm_rows, tiny_llama

from microformers import Trainer, TrainerCallback, TrainingArguments
from microformers_sdk.testing.distributed import finish_distributed_script, start_rank_diagnostics


class StopAfterSave(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def make_trainer(
    output_dir: str, batch_size: int, fsdp: str = "", stop_at: int | None = None, fsdp_config: Any = None
) -> Trainer:
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        learning_rate=1e-3,  # AdamW: the update size does not shrink with the tiny summation-order differences
        weight_decay=0.1,
        max_grad_norm=0.5,
        logging_steps=1,
        save_strategy="steps" if stop_at else "no",
        save_steps=stop_at or 500,
        report_to="none",
        disable_tqdm=True,
        seed=5,
        fsdp=fsdp,
        fsdp_config=fsdp_config,
    )
    rows = lm_rows(24)
    for i, row in enumerate(rows):  # uneven label counts: the loss is normalised over both processes' tokens
        row["labels"] = [-100] * (i % 3) + row["labels"][i % 3 :]
    callbacks = [StopAfterSave(stop_at)] if stop_at else []
    return Trainer(model=tiny_llama(), args=args, train_dataset=rows, callbacks=callbacks)


def main(output_dir: str, batch_size: int, fsdp: str = "") -> Trainer:
    trainer = make_trainer(output_dir, batch_size, fsdp)
    trainer.train()
    trainer.save_model(str(Path(output_dir) / (fsdp or "single")))
    return trainer


def resume_runs(output_dir: str, batch_size: int) -> None:
    root = Path(output_dir)
    make_trainer(str(root / "stopped"), batch_size, "full_shard", stop_at=2).train()
    resumed = make_trainer(str(root / "stopped"), batch_size, "full_shard")
    resumed.train(resume_from_checkpoint=str(root / "stopped" / "checkpoint-2"))
    resumed.save_model(str(root / "resumed"))


def file_digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def sharded_runs(output_dir: str, batch_size: int) -> None:
    import torch.distributed.checkpoint.filesystem as dcp_files

    root = Path(output_dir) / "sharded"
    sharded = {"state_dict_type": "SHARDED_STATE_DICT"}
    make_trainer(str(root), batch_size, "full_shard", stop_at=2, fsdp_config=sharded).train()
    checkpoint = root / "checkpoint-2"
    rank = torch.distributed.get_rank()
    if rank == 0:
        (root / "before_failure.json").write_text(json.dumps(file_digests(checkpoint)))
    torch.distributed.barrier()

    # saving checkpoint-4 fails in process 1, part-way through writing its shard file
    write_data = dcp_files.FileSystemWriter.write_data

    def disk_full(self: Any, plan: Any, planner: Any) -> Any:
        (Path(self.path) / f"__{rank}_0.distcp").write_bytes(b"partial")
        raise OSError(28, "No space left on device (simulated)")

    if rank == 1:
        dcp_files.FileSystemWriter.write_data = disk_full
    failing = make_trainer(str(root), batch_size, "full_shard", stop_at=4, fsdp_config=sharded)
    try:
        failing.train(resume_from_checkpoint=str(checkpoint))
        outcome = "no error"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    finally:
        dcp_files.FileSystemWriter.write_data = write_data
    (root / f"failure_rank{rank}.txt").write_text(outcome)
    torch.distributed.barrier()

    resumed = make_trainer(str(root), batch_size, "full_shard", fsdp_config=sharded)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    resumed.save_model(str(Path(output_dir) / "resumed_sharded"))


if __name__ == "__main__":
    out, batch = sys.argv[1], int(sys.argv[2])
    start_rank_diagnostics(out)
    torch.set_num_threads(1)
    sharded = main(out, batch, "full_shard").model
    held = {
        "local": sum(p.to_local().numel() for p in sharded.parameters()),
        "total": sum(p.numel() for p in sharded.parameters()),
    }
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"elements_rank{torch.distributed.get_rank()}.json").write_text(json.dumps(held))
    main(out, batch, "shard_grad_op")
    resume_runs(out, batch)
    sharded_runs(out, batch)
    finish_distributed_script()

"""Checkpoints: contents, weights_only loading, atomic writes, and bit-identical resume after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from resume_script import make_trainer
from trainer_helpers import lm_rows, tiny_gpt2

from microformers import Trainer
from microformers_sdk.testing import TEST_THREADS
from microformers_trainer import checkpointing

SCRIPT = Path(__file__).parent / "resume_script.py"


def test_sigkill_after_checkpoint_then_resume_is_bit_identical(tmp_path: Path) -> None:
    # 40 rows / batch 4 = 10 batches = 5 steps an epoch; 3 epochs = 15 steps; killed after step 8 (mid-epoch 2)
    killed = tmp_path / "killed"
    # the killed run uses this process's thread count, so every step runs the same kernels either way
    env = {**os.environ, "OMP_NUM_THREADS": str(TEST_THREADS)}
    cmd = [sys.executable, str(SCRIPT), str(killed), "--kill-at", "8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert checkpointing.get_last_checkpoint(killed) == str(killed / "checkpoint-8")

    resumed = make_trainer(str(killed))
    resumed.train(resume_from_checkpoint=True)
    straight = make_trainer(str(tmp_path / "straight"))
    straight.train()

    assert resumed.state.global_step == straight.state.global_step == 15
    theirs = straight.model.state_dict()
    # exact: the resumed run reloads the checkpoint's bytes (weights, optimizer, RNG, data position) and runs the
    # same batches through the same kernels, shapes and thread count as the straight run
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, theirs[name]), f"{name} differs after resume"
    steps = [h["loss"] for h in straight.state.log_history if "loss" in h]
    # exact, as the weights: history restored (copied) + continued by the same computation
    assert [h["loss"] for h in resumed.state.log_history if "loss" in h] == steps
    fresh = tiny_gpt2()
    assert any(not torch.equal(t, fresh.state_dict()[n]) for n, t in theirs.items())


def test_checkpoint_contents_load_weights_only(tmp_path: Path) -> None:
    trainer = make_trainer(str(tmp_path / "out"))
    trainer.args.max_steps = 4
    trainer.train()
    folder = tmp_path / "out" / "checkpoint-4"
    names = {p.name for p in folder.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
    } <= names
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch.load(folder / name, weights_only=True)
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and len([h for h in state["log_history"] if "loss" in h]) == 4
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no staging leftovers


def test_failed_save_leaves_previous_checkpoint_and_is_skipped(tmp_path: Path, monkeypatch: Any) -> None:
    out = tmp_path / "out"
    trainer = make_trainer(str(out))
    trainer.args.max_steps = 8
    original = trainer._save

    def crash_on_second(folder: Path) -> None:
        original(folder)
        if trainer.state.global_step == 8:
            raise KeyboardInterrupt("simulated crash mid-save")

    monkeypatch.setattr(trainer, "_save", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert checkpointing.is_complete(out / "checkpoint-4")
    assert not checkpointing.is_complete(out / "checkpoint-8")
    assert checkpointing.get_last_checkpoint(out) == str(out / "checkpoint-4")
    (out / "checkpoint-9").mkdir()  # a folder cut short by a crash: no trainer_state.json
    assert checkpointing.get_last_checkpoint(out) == str(out / "checkpoint-4")
    resumed = Trainer(model=tiny_gpt2(), args=trainer.args, train_dataset=lm_rows(40))
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 8


def test_a_single_process_run_says_when_it_cannot_restore_the_generators(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One process reads rng_state.pth; a checkpoint of a 2-process run holds rng_state_<rank>.pth instead."""
    trainer = make_trainer(str(tmp_path / "out"))
    trainer.args.max_steps = 4
    trainer.train()
    folder = tmp_path / "out" / "checkpoint-4"
    assert not list(folder.glob("rng_state_*.pth"))
    for rank in (0, 1):
        (folder / f"rng_state_{rank}.pth").write_bytes((folder / "rng_state.pth").read_bytes())
    (folder / "rng_state.pth").unlink()
    resumed = make_trainer(str(tmp_path / "out"))
    resumed.args.max_steps = 5
    with caplog.at_level("WARNING", logger="microformers.trainer"):
        resumed.train(resume_from_checkpoint=str(folder))
    assert resumed.state.global_step == 5
    assert "has no rng_state.pth" in caplog.text

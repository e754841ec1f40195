"""Damaged checkpoint files are refused before use (CheckpointError naming the file), checkpoint folders are
written whole (no file of an earlier save, no staging leftovers) and resume reads only the checkpoint's own files."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from resume_script import make_trainer

from microformers import CheckpointError
from microformers_trainer import checkpointing


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """checkpoint-4 of the tiny GPT-2 run (fused AdamW, the default optimizer), never modified: tests copy it."""
    out = tmp_path_factory.mktemp("run")
    trainer = make_trainer(str(out))
    trainer.args.max_steps = 4
    trainer.train()
    return out / "checkpoint-4"


def _copy(saved: Path, tmp_path: Path) -> Path:
    import shutil

    folder = tmp_path / "out" / "checkpoint-4"
    shutil.copytree(saved, folder)
    return folder


def _resume(folder: Path) -> Any:
    trainer = make_trainer(str(folder.parent))
    trainer.args.max_steps = 5
    return trainer.train(resume_from_checkpoint=str(folder))


def _edit(folder: Path, name: str, change: Callable[[Any], Any]) -> None:
    state = torch.load(folder / name, weights_only=True)
    result = change(state)
    torch.save(state if result is None else result, folder / name)


def _first_moment(state: dict[str, Any]) -> dict[str, Any]:
    return state["state"][next(iter(state["state"]))]


OPTIMIZER_DAMAGE: dict[str, Callable[[Any], Any]] = {
    "moment of another shape": lambda s: _first_moment(s).update(exp_avg=torch.zeros(3, 7)),
    "integer moment": lambda s: _first_moment(s).update(exp_avg_sq=_first_moment(s)["exp_avg_sq"].long()),
    "step of several values": lambda s: _first_moment(s).update(step=torch.zeros(4)),
    "moment missing": lambda s: _first_moment(s).pop("exp_avg"),
    "a parameter group less": lambda s: s["param_groups"].pop(),
    "a parameter less in a group": lambda s: s["param_groups"][0]["params"].pop(),
    "learning rate a string": lambda s: s["param_groups"][0].update(lr="fast"),
    "state for an unknown parameter": lambda s: s["state"].update({999: {}}),
    "not a state dict": lambda s: [1, 2, 3],
}


@pytest.mark.parametrize("damage", OPTIMIZER_DAMAGE, ids=list(OPTIMIZER_DAMAGE))
def test_a_damaged_optimizer_file_is_refused_naming_it(saved_checkpoint: Path, tmp_path: Path, damage: str) -> None:
    folder = _copy(saved_checkpoint, tmp_path)
    _edit(folder, "optimizer.pt", OPTIMIZER_DAMAGE[damage])
    with pytest.raises(CheckpointError, match=r"optimizer\.pt"):
        _resume(folder)


SCHEDULER_DAMAGE: dict[str, Callable[[Any], Any]] = {
    "a learning rate less": lambda s: s["base_lrs"].pop(),
    "step count a string": lambda s: s.update(last_epoch="4"),
    "no last_epoch": lambda s: s.pop("last_epoch"),
}


@pytest.mark.parametrize("damage", SCHEDULER_DAMAGE, ids=list(SCHEDULER_DAMAGE))
def test_a_damaged_scheduler_file_is_refused_naming_it(saved_checkpoint: Path, tmp_path: Path, damage: str) -> None:
    folder = _copy(saved_checkpoint, tmp_path)
    _edit(folder, "scheduler.pt", SCHEDULER_DAMAGE[damage])
    with pytest.raises(CheckpointError, match=r"scheduler\.pt"):
        _resume(folder)


RNG_DAMAGE: dict[str, Callable[[Any], Any]] = {
    "torch state cut short": lambda s: s.update(cpu=s["cpu"][:100]),
    "numpy keys of another dtype": lambda s: s["numpy"].update(keys=s["numpy"]["keys"].float()),
    "python state out of range": lambda s: s["python"].update(state=torch.full((625,), 2**40)),
    "no python state": lambda s: s.pop("python"),
}


@pytest.mark.parametrize("damage", RNG_DAMAGE, ids=list(RNG_DAMAGE))
def test_a_damaged_rng_file_is_refused_naming_it(saved_checkpoint: Path, tmp_path: Path, damage: str) -> None:
    folder = _copy(saved_checkpoint, tmp_path)
    _edit(folder, "rng_state.pth", RNG_DAMAGE[damage])
    with pytest.raises(CheckpointError, match=r"rng_state\.pth"):
        _resume(folder)


def test_a_missing_rng_file_is_refused_as_documented(saved_checkpoint: Path, tmp_path: Path) -> None:
    folder = _copy(saved_checkpoint, tmp_path)
    (folder / "rng_state.pth").unlink()
    with pytest.raises(CheckpointError, match=r"rng_state\.pth is missing"):
        _resume(folder)


@pytest.mark.parametrize(
    "content",
    ["{not json", "[1, 2]", json.dumps({"global_step": "4"}), json.dumps({"global_step": 4, "log_history": {"a": 1}})],
    ids=["invalid json", "a list", "step a string", "history not a list"],
)
def test_garbage_trainer_state_is_refused_naming_it(saved_checkpoint: Path, tmp_path: Path, content: str) -> None:
    folder = _copy(saved_checkpoint, tmp_path)
    (folder / "trainer_state.json").write_text(content)
    with pytest.raises(CheckpointError, match=r"trainer_state\.json"):
        _resume(folder)


def _index_to(folder: Path, name: str) -> None:
    from safetensors import safe_open

    with safe_open(str(folder / name), "pt") as f:
        keys = list(f.keys())
    index = {"metadata": {}, "weight_map": dict.fromkeys(keys, name)}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("escape", ["../outside.safetensors", "ABSOLUTE", "sub/../../outside.safetensors"])
def test_a_shard_index_cannot_point_outside_the_checkpoint(saved_checkpoint: Path, tmp_path: Path, escape: str) -> None:
    folder = _copy(saved_checkpoint, tmp_path)
    outside = folder.parent / "outside.safetensors"
    (folder / "model.safetensors").rename(outside)
    name = str(outside) if escape == "ABSOLUTE" else escape
    (folder / "sub").mkdir()
    _index_to(folder, name)
    with pytest.raises(CheckpointError, match="not a file inside"):
        _resume(folder)


def test_a_shard_in_a_subfolder_of_the_checkpoint_is_read(saved_checkpoint: Path, tmp_path: Path) -> None:
    folder = _copy(saved_checkpoint, tmp_path)
    (folder / "sub").mkdir()
    (folder / "model.safetensors").rename(folder / "sub" / "model.safetensors")
    _index_to(folder, "sub/model.safetensors")
    assert _resume(folder).global_step == 5


def test_an_intact_checkpoint_still_resumes(saved_checkpoint: Path, tmp_path: Path) -> None:
    folder = _copy(saved_checkpoint, tmp_path)
    output = _resume(folder)
    assert output.global_step == 5


def test_rewriting_a_checkpoint_keeps_no_file_of_the_earlier_save(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = make_trainer(str(out))
    first.args.max_steps = 4
    first.train()
    assert (out / "checkpoint-4" / "optimizer.pt").is_file()
    (out / "checkpoint-4" / "stray.bin").write_bytes(b"from an earlier run")
    second = make_trainer(str(out))
    second.args.max_steps, second.args.save_only_model = 4, True
    second.train()
    names = {p.name for p in (out / "checkpoint-4").iterdir()}
    assert "model.safetensors" in names and "trainer_state.json" in names
    assert not names & {"optimizer.pt", "scheduler.pt", "rng_state.pth", "stray.bin"}


def test_staging_folders_of_killed_saves_are_removed_by_the_next_save(tmp_path: Path) -> None:
    """A real SIGKILL inside the model write of checkpoint-4 leaves the checkpoint's staging folder and the one
    ``save_pretrained`` nests beside it; the next checkpoint save of any step removes both."""
    from microformers import staging

    out = tmp_path / "out"
    dying = make_trainer(str(out))
    dying.args.max_steps = 4

    def killed_mid_write(folder: Any, **kwargs: Any) -> None:
        with staging.staged_folder(folder) as nested:
            (nested / "partial").write_bytes(b"x")
            os.kill(os.getpid(), signal.SIGKILL)

    dying.model.save_pretrained = killed_mid_write
    pid = os.fork()  # a child process killed for real, without importing everything again
    if pid == 0:
        try:
            dying.train()
        finally:
            os._exit(3)  # not reached: the save kills the child
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert len(leftovers) == 2 and any(n.startswith("..checkpoint-4") for n in leftovers), leftovers

    trainer = make_trainer(str(out))
    trainer.args.max_steps, trainer.args.save_steps = 3, 3  # saves checkpoint-3, another step
    trainer.train()
    assert sorted(os.listdir(out)) == ["checkpoint-3"]


def test_the_sweep_puts_back_a_checkpoint_moved_aside_and_keeps_live_saves(tmp_path: Path) -> None:
    import fcntl

    out = tmp_path / "out"
    moved = out / ".checkpoint-8.microformers-old-abc"
    moved.mkdir(parents=True)
    (moved / "trainer_state.json").write_text("{}")
    live = out / ".checkpoint-12.microformers-save-def"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        checkpointing.remove_stale_staging(out)
    finally:
        os.close(fd)
    assert (out / "checkpoint-8" / "trainer_state.json").is_file() and not moved.exists()
    assert live.is_dir()


def test_the_reference_rng_file_format_resumes_like_ours(saved_checkpoint: Path, tmp_path: Path) -> None:
    """The reference saves numpy's state as an array and python's as a tuple; read as ours, same run."""
    import random

    import numpy as np

    ours = _copy(saved_checkpoint, tmp_path / "ours")
    theirs = _copy(saved_checkpoint, tmp_path / "theirs")
    state = checkpointing.load_rng_file(ours / "rng_state.pth")
    random.setstate((state["python"]["version"], tuple(state["python"]["state"].tolist()), state["python"]["gauss"]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    reference_format = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": state["cpu"]}
    torch.save(reference_format, theirs / "rng_state.pth")
    with pytest.raises(Exception):  # noqa: B017 (the plain weights_only load refuses the numpy array)
        torch.load(theirs / "rng_state.pth", weights_only=True)
    trainers = []
    for folder in (ours, theirs):
        trainer = make_trainer(str(folder.parent))
        trainer.args.max_steps = 6
        trainer.train(resume_from_checkpoint=str(folder))
        trainers.append(trainer)
    for name, tensor in trainers[0].model.state_dict().items():
        assert torch.equal(tensor, trainers[1].model.state_dict()[name]), name

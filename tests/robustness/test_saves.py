"""Atomic saves: SIGKILL at many points of model and tokenizer saves, fallbacks, leftovers, permissions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import microformers
from microformers import staging

HERE = Path(__file__).parent
LONG = os.environ.get("MICROFORMERS_FUZZ", "").lower() == "long"


def tiny_llama(seed: int = 0, layers: int = 1) -> microformers.PreTrainedModel:
    from microformers_llama import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(config)


def test_sigkill_at_any_point_leaves_the_old_or_the_new_checkpoint(tmp_path: Path) -> None:
    """The folder equals (bytes) and loads as (tensors, vocabulary) the complete old or new save, every time."""
    points, delays = (120, 40) if LONG else (20, 3)
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(HERE / "save_kill.py"), "--points", str(points), "--random", str(delays), "--json", out],
        capture_output=True,
        text=True,
        timeout=900 if LONG else 240,
    )
    assert out.is_file(), proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [r["scenario"] for r in results] == [
        "sharded->sharded", "sharded->single", "single->sharded", "safetensors->bin", "tokenizer"
    ]
    for result in results:
        assert result["failures"] == [], result
        assert result["leftovers"] == [], result  # staging folders of the killed saves were removed
        assert result["modes"] == ["0o644"], result  # umask 022, like the reference's files
        assert result["kill_points"] >= min(points, result["events"]) * 0.9
        # the kills really interrupted saves, at instants before and after the swap
        assert result["killed"] >= result["kill_points"] - 2
        assert result["outcomes"]["old"] > 0 and result["outcomes"]["new"] > 0
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_failed_save_keeps_old_folder_and_other_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "ckpt"
    tiny_llama(0).save_pretrained(target, max_shard_size="4KB")
    (target / "README.md").write_text("hello")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    new = tiny_llama(1, layers=2)

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(new.config, "save_pretrained", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        new.save_pretrained(target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no staging folder left
    monkeypatch.undo()
    new.save_pretrained(target)  # sharded -> single: the old shards and index are gone, README kept
    names = sorted(p.name for p in target.iterdir())
    assert names == ["README.md", "config.json", "generation_config.json", "model.safetensors"]
    assert (target / "README.md").read_text() == "hello"


def test_save_without_renameat2_uses_two_renames_and_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(staging, "_exchange", lambda a, b: False)
    target = tmp_path / "ckpt"
    old = tiny_llama(0)
    old.save_pretrained(target)
    old_files = {p.name: p.read_bytes() for p in target.iterdir()}
    tiny_llama(1).save_pretrained(target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} != old_files
    old.save_pretrained(target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == old_files

    # A process that dies between the two renames leaves the old folder complete beside the target ...
    real_rename = os.rename
    calls = []

    def dying_rename(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        real_rename(src, dst)

    monkeypatch.setattr(staging.os, "rename", dying_rename)
    with pytest.raises(KeyboardInterrupt):
        tiny_llama(1).save_pretrained(target)
    monkeypatch.setattr(staging.os, "rename", real_rename)
    assert not target.exists()
    (left,) = [p for p in tmp_path.iterdir() if ".microformers-old-" in p.name]
    assert {p.name: p.read_bytes() for p in left.iterdir()} == old_files
    # ... and the next save into it puts that folder back before writing (here: a tokenizer save)
    with staging.staged_folder(target) as folder:
        (folder / "notes.txt").write_text("x")
    assert {p.name: p.read_bytes() for p in target.iterdir()} == {**old_files, "notes.txt": b"x"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_save_without_a_sibling_folder_moves_files_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only parent or a mount point: staging inside the target (documented as not atomic)."""
    target = tmp_path / "ckpt"
    tiny_llama(0).save_pretrained(target, max_shard_size="4KB")
    real_mkdtemp = staging.tempfile.mkdtemp

    def no_sibling(prefix: str, dir: str) -> str:
        if Path(dir) == tmp_path:
            raise PermissionError(13, "Permission denied", dir)
        return real_mkdtemp(prefix=prefix, dir=dir)

    monkeypatch.setattr(staging.tempfile, "mkdtemp", no_sibling)
    new = tiny_llama(1, layers=2)
    new.save_pretrained(target)
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "generation_config.json", "model.safetensors"]
    loaded = microformers.AutoModelForCausalLM.from_pretrained(target)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), new.state_dict().values()))


def test_save_into_working_directory_and_through_symlink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "ckpt"
    target.mkdir()
    monkeypatch.chdir(target)
    tiny_llama(0).save_pretrained(".")
    tiny_llama(1).save_pretrained(".")
    assert Path(os.getcwd()).resolve() == target.resolve() and Path("config.json").is_file()
    link = tmp_path / "link"
    link.symlink_to(target)
    tiny_llama(2).save_pretrained(link)
    assert link.is_symlink() and (link / "model.safetensors").is_file()


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_saved_files_follow_the_umask(tmp_path: Path, mask: int, mode: int) -> None:
    previous = os.umask(mask)
    try:
        tiny_llama(0).save_pretrained(tmp_path / "m", max_shard_size="4KB")
        tiny_llama(0).config.save_pretrained(tmp_path / "c")
    finally:
        os.umask(previous)
    files = [p for p in (tmp_path / "m").iterdir()] + [tmp_path / "c" / "config.json"]
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {oct(mode)}
    assert (tmp_path / "m").stat().st_mode & 0o777 == 0o777 & ~mask
    (tmp_path / "m").chmod(0o700)  # an existing folder keeps its own permissions
    tiny_llama(1).save_pretrained(tmp_path / "m")
    assert (tmp_path / "m").stat().st_mode & 0o777 == 0o700


def test_live_staging_folder_of_another_save_is_not_removed(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    target.mkdir()
    other = tmp_path / ".ckpt.microformers-save-other"
    other.mkdir()
    lock = staging._lock(other)  # another process's save in progress holds its lock
    assert lock is not None
    dead = tmp_path / ".ckpt.microformers-save-dead"
    dead.mkdir()
    try:
        tiny_llama(0).save_pretrained(target)
        assert other.is_dir() and not dead.exists()
    finally:
        os.close(lock)

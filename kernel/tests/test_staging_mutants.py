"""Behaviour of ``microformers.staging`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from microformers import staging


def test_the_move_in_fallback_writes_config_json_last_and_drops_stale_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    staged, target = tmp_path / "staged", tmp_path / "target"
    staged.mkdir()
    target.mkdir()
    for name in ("a.safetensors", "config.json", "z.safetensors"):
        (staged / name).write_text(name)
    (target / "old-00002.safetensors").write_text("stale")
    (target / "notes.txt").write_text("kept")
    moved: list[str] = []
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        moved.append(Path(dst).name)
        real_replace(src, dst)

    monkeypatch.setattr(staging.os, "replace", replace)
    staging._move_in(staged, target, ["*.safetensors"])
    assert moved == ["a.safetensors", "z.safetensors", "config.json"]  # a reader never sees a new config early
    assert sorted(p.name for p in target.iterdir()) == ["a.safetensors", "config.json", "notes.txt", "z.safetensors"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux-only")
def test_exchange_of_missing_paths_raises_the_system_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        staging._exchange(tmp_path / "missing-a", tmp_path / "missing-b")
    assert info.value.strerror == os.strerror(errno.ENOENT) and info.value.filename == str(tmp_path / "missing-b")


def test_carry_over_keeps_folders_links_and_files_the_new_save_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    (old / "extra" / "deeper").mkdir(parents=True)
    (old / "extra" / "deeper" / "notes.txt").write_text("kept")
    (old / "extra").chmod(0o750)
    (old / "linked").symlink_to("extra")  # a link to a folder stays a link
    (old / "shared").mkdir()
    (old / "shared" / "old.txt").write_text("old")
    (new / "shared").mkdir(parents=True)
    (new / "shared" / "new.txt").write_text("new")

    def no_hard_links(src: str, dst: str) -> None:
        raise OSError("cross-device")  # hard links refused: files are copied

    monkeypatch.setattr(staging.os, "link", no_hard_links)
    staging._carry_over(old, new, ())
    assert (new / "extra" / "deeper" / "notes.txt").read_text() == "kept"
    assert (new / "extra").stat().st_mode & 0o777 == 0o750  # the folder's permissions are carried too
    assert (new / "linked").is_symlink() and os.readlink(new / "linked") == "extra"
    assert sorted(p.name for p in (new / "shared").iterdir()) == ["new.txt", "old.txt"]

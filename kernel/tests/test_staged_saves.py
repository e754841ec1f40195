"""``microformers.staging``: the staged, atomic folder save (``staged_folder``), its fallbacks and clean-up."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from microformers import staging

# From test_staging_full_mutants.py: ``microformers.staging`` behaviour the full mutation run found unasserted
# (docs/reliability.md).


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux-only")


def _folder(path: Path, **files: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _contents(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir()) if p.is_file()}


class _FakeLibc:
    """A C library as ``ctypes.CDLL(None)`` returns it, with or without a ``renameat2`` of its own."""

    def __init__(self, renameat2: Callable[..., int] | None) -> None:
        if renameat2 is not None:
            self.renameat2 = renameat2


def _use_libc(monkeypatch: pytest.MonkeyPatch, renameat2: Callable[..., int] | None) -> None:
    monkeypatch.setattr(ctypes, "CDLL", lambda *args, **kwargs: _FakeLibc(renameat2))


# -- _lock ----------------------------------------------------------------------------------------


@pytest.mark.skipif(staging.fcntl is None, reason="no advisory locks on this platform")
def test_lock_waits_for_a_lock_held_elsewhere_and_takes_it_once_released(tmp_path: Path) -> None:
    """The two-rename fallback must wait for another save's lock, not fail with BlockingIOError."""
    folder = _folder(tmp_path / "ckpt")
    held = staging._lock(folder)
    results: list[object] = []
    waiter = threading.Thread(target=lambda: results.append(_lock_or_error(folder)), daemon=True)
    waiter.start()
    time.sleep(0.3)  # let the waiter reach the lock while it is still held
    staging._unlock(held)
    waiter.join(timeout=30)
    assert not waiter.is_alive() and len(results) == 1 and isinstance(results[0], int), results
    staging._unlock(results[0])


@pytest.mark.skipif(staging.fcntl is None, reason="no advisory locks on this platform")
def test_lock_without_waiting_refuses_a_held_lock_at_once(tmp_path: Path) -> None:
    """What lets a save skip another live save's staging folder instead of hanging on it."""
    folder = _folder(tmp_path / ".ckpt.microformers-save-live")
    held = staging._lock(folder)
    results: list[object] = []
    attempt = threading.Thread(target=lambda: results.append(_lock_or_error(folder, wait=False)), daemon=True)
    attempt.start()
    attempt.join(timeout=30)
    staging._unlock(held)
    assert not attempt.is_alive(), "a non-blocking lock attempt waited for the holder"
    assert len(results) == 1 and isinstance(results[0], BlockingIOError), results


@pytest.mark.skipif(staging.fcntl is None, reason="no advisory locks on this platform")
def test_unlock_releases_the_lock(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "ckpt")
    staging._unlock(staging._lock(folder))
    again = staging._lock(folder, wait=False)  # free again: no BlockingIOError
    assert isinstance(again, int)
    staging._unlock(again)
    staging._unlock(None)  # what _lock gives where there are no advisory locks


def test_without_advisory_locks_staging_folders_of_other_saves_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows: a staging folder cannot be told live or dead without locks, so none is removed."""
    target = _folder(tmp_path / "ckpt", **{"config.json": "{}"})
    other = _folder(tmp_path / ".ckpt.microformers-save-other", **{"model.safetensors": "half written"})
    inside = _folder(target / ".microformers-save-other")
    monkeypatch.setattr(staging, "fcntl", None)
    staging._remove_stale(target)
    assert other.is_dir() and inside.is_dir() and _contents(other) == {"model.safetensors": "half written"}


@pytest.mark.skipif(staging.fcntl is None, reason="no advisory locks on this platform")
def test_remove_stale_skips_live_saves_without_waiting_and_removes_dead_ones(tmp_path: Path) -> None:
    target = _folder(tmp_path / "ckpt", **{"config.json": "{}"})
    live = _folder(tmp_path / ".ckpt.microformers-save-live")
    live_inside = _folder(target / ".microformers-save-live")
    dead = _folder(tmp_path / ".ckpt.microformers-save-dead", **{"model.safetensors": "half written"})
    dead_inside = _folder(target / ".microformers-save-dead")
    unrelated = _folder(tmp_path / ".other.microformers-save-x")  # another target's staging folder
    locks = [staging._lock(live), staging._lock(live_inside)]  # saves in progress elsewhere
    try:
        cleaner = threading.Thread(target=staging._remove_stale, args=(target,), daemon=True)
        cleaner.start()
        cleaner.join(timeout=30)
        assert not cleaner.is_alive(), "the cleanup waited for a live save"
    finally:
        for lock in locks:
            staging._unlock(lock)
    assert live.is_dir() and live_inside.is_dir() and unrelated.is_dir()
    assert not dead.exists() and not dead_inside.exists()
    assert _contents(target) == {"config.json": "{}"}


@pytest.mark.skipif(staging.fcntl is None, reason="no advisory locks on this platform")
def test_a_dead_save_is_not_mistaken_for_the_old_folder_of_an_empty_target(tmp_path: Path) -> None:
    """Only an ``-old-`` folder is put back; a killed save's half-written staging folder is removed."""
    target = _folder(tmp_path / "ckpt")  # empty: just created by this save
    dead = _folder(tmp_path / ".ckpt.microformers-save-dead", **{"model.safetensors": "half written"})
    staging._remove_stale(target)
    assert target.is_dir() and list(target.iterdir()) == [] and not dead.exists()


@pytest.mark.skipif(staging.fcntl is None, reason="no advisory locks on this platform")
def test_a_stray_file_named_like_a_staging_folder_does_not_break_the_cleanup(tmp_path: Path) -> None:
    """The cleanup before every save: what cannot be removed as a folder is left, and the save goes on."""
    target = _folder(tmp_path / "ckpt", **{"config.json": "old"})
    (tmp_path / ".ckpt.microformers-save-stray").write_text("not a folder")
    staging._remove_stale(target)  # no NotADirectoryError
    assert _contents(target) == {"config.json": "old"}


def _lock_or_error(folder: Path, wait: bool = True) -> int | OSError | None:
    try:
        return staging._lock(folder) if wait else staging._lock(folder, wait=False)  # waiting is the default
    except OSError as error:
        return error


# -- _exchange ------------------------------------------------------------------------------------


@linux_only
def test_exchange_swaps_two_folders_and_says_so(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", **{"old.txt": "old"})
    b = _folder(tmp_path / "b", **{"new.txt": "new"})
    assert staging._exchange(a, b) is True
    assert _contents(a) == {"new.txt": "new"} and _contents(b) == {"old.txt": "old"}


@linux_only
def test_exchange_of_relative_paths_resolves_them_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _folder(tmp_path / "a", **{"old.txt": "old"})
    _folder(tmp_path / "b", **{"new.txt": "new"})
    monkeypatch.chdir(tmp_path)
    assert staging._exchange(Path("a"), Path("b")) is True
    assert _contents(tmp_path / "a") == {"new.txt": "new"} and _contents(tmp_path / "b") == {"old.txt": "old"}


def test_exchange_is_unsupported_off_linux(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _folder(tmp_path / "a", **{"old.txt": "old"})
    b = _folder(tmp_path / "b", **{"new.txt": "new"})
    monkeypatch.setattr(staging.sys, "platform", "darwin")
    assert staging._exchange(a, b) is False
    assert _contents(a) == {"old.txt": "old"} and _contents(b) == {"new.txt": "new"}  # nothing moved


@linux_only
def test_exchange_is_unsupported_with_a_c_library_without_renameat2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """glibc older than 2.28 or musl: the save falls back to two renames instead of failing."""
    a = _folder(tmp_path / "a", **{"old.txt": "old"})
    b = _folder(tmp_path / "b", **{"new.txt": "new"})
    _use_libc(monkeypatch, None)
    assert staging._exchange(a, b) is False
    assert _contents(a) == {"old.txt": "old"}


@linux_only
@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP])
def test_exchange_is_unsupported_where_the_kernel_or_file_system_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    calls: list[tuple[object, ...]] = []

    def refusing(*args: object) -> int:
        calls.append(args)
        ctypes.set_errno(code)
        return -1

    _use_libc(monkeypatch, refusing)
    assert staging._exchange(tmp_path / "a", tmp_path / "b") is False
    assert calls == [(-100, os.fsencode(tmp_path / "a"), -100, os.fsencode(tmp_path / "b"), 2)]


# -- _move_in (no sibling folder possible) ----------------------------------------------------------


def test_move_in_replaces_a_folder_of_the_target_with_the_staged_one(tmp_path: Path) -> None:
    staged, target = tmp_path / "staged", tmp_path / "target"
    _folder(staged / "tokenizer", **{"vocab.json": "new"})
    _folder(target / "tokenizer", **{"vocab.json": "old", "merges.txt": "old"})
    staging._move_in(staged, target, ())
    assert _contents(target / "tokenizer") == {"vocab.json": "new"}  # the old folder's files do not linger


# -- _carry_over ------------------------------------------------------------------------------------


def test_carry_over_keeps_every_old_file_the_new_save_did_not_write(tmp_path: Path) -> None:
    shards = {f"model-{i:05d}.safetensors": "old" for i in range(30)}
    old = _folder(tmp_path / "old", **shards, **{"README.md": "r", "LICENSE": "l", "notes.txt": "n"})
    new = _folder(tmp_path / "new", **{name: "new" for name in shards})
    staging._carry_over(old, new, ())
    assert _contents(new) == {**{name: "new" for name in shards}, "README.md": "r", "LICENSE": "l", "notes.txt": "n"}


def test_carry_over_keeps_a_file_the_new_save_wrote_where_the_old_folder_had_a_folder(tmp_path: Path) -> None:
    old = _folder(tmp_path / "old")
    _folder(old / "tokenizer", **{"vocab.json": "old"})
    new = _folder(tmp_path / "new", tokenizer="a file now")
    staging._carry_over(old, new, (), top=True)
    assert _contents(new) == {"tokenizer": "a file now"}


def test_carry_over_skips_staging_names_only_at_the_top(tmp_path: Path) -> None:
    """A save's own in-folder staging folder is left behind; a sub-folder's file of that name is content."""
    old = _folder(tmp_path / "old")
    _folder(old / ".microformers-save-abc", **{"model.safetensors": "half written"})
    _folder(old / "extra", **{".microformers-save-notes": "kept"})
    new = _folder(tmp_path / "new")
    staging._carry_over(old, new, (), top=True)
    assert sorted(p.name for p in new.iterdir()) == ["extra"]
    assert _contents(new / "extra") == {".microformers-save-notes": "kept"}


# -- _fsync_tree --------------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name the flushed descriptors")
def test_fsync_tree_flushes_every_staged_file_and_folder_once_and_no_link_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    folder = _folder(tmp_path / "staged", **{f"model-{i}.safetensors": "w" for i in range(4)})
    (folder / "a-link.txt").symlink_to(outside)
    (folder / "z-link.txt").symlink_to(outside)
    _folder(folder / "tokenizer", **{"vocab.json": "{}"})
    flushed: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(staging.os, "fsync", recording_fsync)
    monkeypatch.chdir(tmp_path)  # relative names would resolve here, not in the staged folder
    staging._fsync_tree(folder)
    expected = [str(folder), str(folder / "tokenizer"), str(folder / "tokenizer" / "vocab.json")]
    expected += [str(folder / f"model-{i}.safetensors") for i in range(4)]
    assert sorted(flushed) == sorted(expected)


# From test_staging_mutants.py: Behaviour of ``microformers.staging`` that the mutation pass found unasserted
# (docs/reliability.md).


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

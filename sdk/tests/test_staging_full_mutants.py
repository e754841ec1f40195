"""``microformers_sdk.staging`` behaviour the full mutation run found unasserted (docs/reliability.md)."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from microformers_sdk import staging

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

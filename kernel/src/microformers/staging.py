"""``staged_folder``: a save builds the new folder beside the old one and swaps it in atomically.

Every save of the kernel and of plugins goes through it (``microformers.hub.staged_folder`` is this
function): a hidden sibling staging folder, hard links for the
files a save does not write, one ``renameat2(RENAME_EXCHANGE)`` (two renames where unsupported), advisory
locks so concurrent saves never remove each other's staging folders. See docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import ConfigError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; stale staging folders are then left alone
    fcntl = None  # type: ignore[assignment]

_SAVE_TAG = ".microformers-save-"
_OLD_TAG = ".microformers-old-"


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike[str], *, replace: Iterable[str] = ()) -> Iterator[Path]:
    """Build the new content of folder ``target`` in a staging folder, then swap it in atomically.

    The body writes into the yielded staging folder (a hidden sibling of ``target``). On success the
    files of the old ``target`` that the body did not write are hard-linked (or copied) into it, except
    top-level names matching a ``replace`` glob (stale shards), and the two folders are exchanged with
    one ``renameat2(RENAME_EXCHANGE)``: at every instant ``target`` is the complete old or the complete
    new folder. Where the kernel or file system cannot exchange, two renames are used; a process killed
    between them leaves the old folder beside ``target`` and the next save puts it back. Where no sibling
    can be created (read-only parent, ``target`` a mount point) files are moved in one by one (not atomic).
    Staging folders of killed saves are removed by the next save; see docs/reliability.md.
    """
    target = Path(os.path.realpath(Path(target).expanduser()))
    if target.exists() and not target.is_dir():
        raise ConfigError(f"cannot save into {target}: it is a file, not a folder; pass a folder path")
    target.mkdir(parents=True, exist_ok=True)
    _remove_stale(target)
    staging = None
    if target.stat().st_dev == target.parent.stat().st_dev:  # not a mount point: a sibling can be swapped in
        with contextlib.suppress(OSError):
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}{_SAVE_TAG}", dir=target.parent))
    if staging is None:
        staging = Path(tempfile.mkdtemp(prefix=_SAVE_TAG, dir=target))
    lock = _lock(staging)  # marks it in use for other processes' _remove_stale
    try:
        os.chmod(staging, target.stat().st_mode & 0o7777)  # the folder keeps its permissions
        yield staging
        if staging.parent == target:
            _move_in(staging, target, replace)
            return
        _carry_over(target, staging, tuple(replace), top=True)
        _fsync_tree(staging)
        if not _exchange(staging, target):
            old = target.with_name(staging.name.replace(_SAVE_TAG, _OLD_TAG))
            old_lock = _lock(target)
            try:
                os.rename(target, old)
                os.rename(staging, target)
                os.rename(old, staging)
            finally:
                _unlock(old_lock)
        with contextlib.suppress(OSError):
            if os.path.samefile(os.getcwd(), staging):
                os.chdir(target)  # our working directory was the old folder
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # after the swap it holds the old folder
        _unlock(lock)


def _lock(folder: Path, wait: bool = True) -> int | None:
    """An open descriptor of ``folder`` holding an exclusive advisory lock (OSError if held and not ``wait``)."""
    if fcntl is None:
        return None
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with Linux ``renameat2(RENAME_EXCHANGE)``; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:  # glibc older than 2.28, or musl
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(-100, os.fsencode(a), -100, os.fsencode(b), 2) == 0:  # AT_FDCWD, RENAME_EXCHANGE
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _remove_stale(target: Path) -> None:
    """Remove staging folders of saves that died (their lock is free); restore an old folder left by one."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}({re.escape(_SAVE_TAG)}|{re.escape(_OLD_TAG)})")
    stale = [p for p in target.parent.iterdir() if pattern.match(p.name)]
    stale += [p for p in target.iterdir() if p.name.startswith(_SAVE_TAG)]  # in-folder staging
    for path in stale if fcntl is not None else ():
        try:
            _unlock(_lock(path, wait=False))
        except OSError:
            continue  # a live save holds it
        if _OLD_TAG in path.name and not any(target.iterdir()):
            os.rmdir(target)
            os.rename(path, target)
        else:
            shutil.rmtree(path, ignore_errors=True)


def _carry_over(source: Path, dest: Path, replace: tuple[str, ...], top: bool = False) -> None:
    """Hard-link (or copy) into ``dest`` what ``source`` has and ``dest`` lacks, recursively."""
    for entry in os.scandir(source):
        if top and (entry.name.startswith(_SAVE_TAG) or any(fnmatch.fnmatchcase(entry.name, p) for p in replace)):
            continue
        path = dest / entry.name
        if entry.is_dir(follow_symlinks=False):
            if not os.path.lexists(path):
                path.mkdir()
                shutil.copystat(entry.path, path)
            if path.is_dir() and not path.is_symlink():
                _carry_over(Path(entry.path), path, ())
        elif os.path.lexists(path):
            continue
        elif entry.is_symlink():
            os.symlink(os.readlink(entry.path), path)
        else:
            try:
                os.link(entry.path, path)
            except OSError:
                shutil.copy2(entry.path, path)


def _fsync_tree(folder: Path) -> None:
    """Flush the staged files and folders to disk so a power cut after the swap cannot lose them."""
    for root, _, names in os.walk(folder):
        for name in [*names, ""]:
            path = os.path.join(root, name) if name else root
            if name and os.path.islink(path):
                continue
            with contextlib.suppress(OSError):  # (folders cannot be opened on Windows)
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


def _move_in(staging: Path, target: Path, replace: Iterable[str]) -> None:
    """Fallback without a sibling folder: move staged files in one by one (config last), drop stale ones."""
    written = {p.name for p in staging.iterdir()}
    for path in target.iterdir():
        if path.name not in written and any(fnmatch.fnmatchcase(path.name, p) for p in replace):
            path.unlink(missing_ok=True)
    for item in sorted(staging.iterdir(), key=lambda p: (p.name == "config.json", p.name)):
        dest = target / item.name
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(item, dest)

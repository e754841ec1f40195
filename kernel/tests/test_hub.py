"""``microformers.hub``: resolving folders and files (local or Hub), downloads' arguments and error messages,
the umask, atomic writes.

The Hub is unreachable in tests: ``huggingface_hub``'s download functions are replaced by recorders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
from huggingface_hub import errors as hub_errors

from microformers import FileMissingError, hub

# From test_hub_mutants.py: Behaviour of ``microformers.hub`` that the mutation pass found unasserted
# (docs/reliability.md). The Hub is unreachable in tests: ``huggingface_hub``'s download functions are replaced by
# recorders, so the arguments microformers hands them (revision, offline mode, patterns, the repo name) are checked.


@pytest.mark.parametrize(
    ("value", "offline"), [("1", True), ("TRUE", True), ("On", True), ("yes", True), ("0", False), (None, False)]
)
def test_hf_hub_offline_values(monkeypatch: pytest.MonkeyPatch, value: str | None, offline: bool) -> None:
    if value is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub.is_offline() is offline and hub.is_offline(True) is True


def test_what_looks_like_a_path() -> None:
    assert hub._looks_like_path("/models") and hub._looks_like_path("./m") and hub._looks_like_path("~/m")
    assert hub._looks_like_path("a/b/c") and not hub._looks_like_path("org/name")


def _recorder(calls: list[dict[str, Any]], result: Any) -> Any:
    def record(*args: Any, **kwargs: Any) -> Any:
        calls.append({"args": args, **kwargs})
        if isinstance(result, BaseException):
            raise result
        return result

    return record


def test_resolve_folder_hands_the_hub_its_arguments(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder(calls, str(tmp_path)))
    folder = hub.resolve_folder("org/name", ["*.json"], subfolder="sub", local_files_only=True, revision="v1")
    assert folder == tmp_path / "sub"
    assert calls[0]["args"] == ("org/name",) and calls[0]["allow_patterns"] == ["sub/*.json"]
    assert calls[0]["local_files_only"] is True and calls[0]["revision"] == "v1"
    hub.resolve_folder("org/name", ["*.json"])
    assert calls[1]["local_files_only"] is False and calls[1]["allow_patterns"] == ["*.json"]


def test_resolve_folder_names_a_repo_it_cannot_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = hub_errors.RepositoryNotFoundError.__new__(hub_errors.RepositoryNotFoundError)  # no HTTP response
    Exception.__init__(missing, "404")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder([], missing))
    with pytest.raises(FileMissingError, match=r"^'org/name' is neither a local folder nor an accessible Hub repo$"):
        hub.resolve_folder("org/name")


def test_hub_download_passes_revision_and_offline_mode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _recorder(calls, str(tmp_path / "config.json")))
    path = hub._hub_download("org/name", "config.json", True, "v2", None, True, None, "", False)
    assert path == tmp_path / "config.json"
    assert calls[0]["revision"] == "v2" and calls[0]["local_files_only"] is True


class _FakeStatus:
    def __init__(self, text: str) -> None:
        self.text = text

    def read_text(self) -> str:
        return self.text


def test_umask_from_proc_and_its_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    current = os.umask(0o022)
    os.umask(current)
    monkeypatch.setattr(hub, "Path", lambda _: _FakeStatus("Name:\tpython\nUmask:\t0027\n"))
    assert hub.umask() == 0o027
    # an unreadable value falls back to asking the kernel (and leaves the umask as it was)
    monkeypatch.setattr(hub, "Path", lambda _: _FakeStatus("Umask:\tnot-octal\n"))
    assert hub.umask() == current and os.umask(current) == current


def test_a_cached_snapshot_is_looked_up_without_downloading(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder(calls, "/cache/snap"))
    assert hub._cached_snapshot_exists("org/name", "v1", None) is True
    assert calls[0]["local_files_only"] is True and calls[0]["revision"] == "v1"
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder([], OSError("not cached")))
    assert hub._cached_snapshot_exists("org/name", None, None) is False


# -- third pass (full run of the module) ---------------------------------------------------------------------------


def test_the_cached_snapshot_lookup_names_the_repo_and_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder(calls, "/cache/snap"))
    assert hub._cached_snapshot_exists("org/name", None, "/my/cache") is True
    assert calls[0]["args"] == ("org/name",) and calls[0]["cache_dir"] == "/my/cache"


def _no_response(error: type[Exception]) -> Exception:
    exc = error.__new__(error)  # no HTTP response needed
    Exception.__init__(exc, "404")
    return exc


def test_hub_download_subfolder_and_the_repo_named_in_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _recorder(calls, str(tmp_path / "config.json")))
    hub._hub_download("org/name", "config.json", True, None, None, False, "tok", "sub", True)
    hub._hub_download("org/name", "config.json", True, None, None, False, None, "", False)
    assert calls[0]["subfolder"] == "sub" and calls[1]["subfolder"] is None
    assert calls[0]["token"] == "tok" and calls[0]["force_download"] is True and calls[1]["force_download"] is False
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _recorder([], _no_response(hub_errors.EntryNotFoundError)))
    with pytest.raises(FileMissingError, match=r"^config\.json is not in Hub repo org/name@v2: 404$"):
        hub._hub_download("org/name", "config.json", True, "v2", None, False, None, "", False)
    with pytest.raises(FileMissingError, match=r"^config\.json is not in Hub repo org/name: 404$"):
        hub._hub_download("org/name", "config.json", True, None, None, False, None, "", False)


def test_staged_folder_is_the_kernels_own_and_honours_the_replace_globs(tmp_path: Path) -> None:
    from microformers import staging

    assert hub.staged_folder is staging.staged_folder  # no lookup: the kernel's implementation
    target = tmp_path / "target"
    target.mkdir()
    (target / "old.bin").write_text("stale")
    (target / "keep.txt").write_text("kept")
    with hub.staged_folder(target, replace=["*.bin"]) as folder:
        (folder / "new.bin").write_text("fresh")
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt", "new.bin"]


def test_an_optional_file_missing_from_a_cached_snapshot_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(
        huggingface_hub, "hf_hub_download", _recorder([], hub_errors.LocalEntryNotFoundError("not cached"))
    )
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder([], "/cache/snap"))
    assert hub._hub_download("org/name", "extra.json", False, None, None, True, None, "", False) is None
    with pytest.raises(
        FileMissingError, match=r"^config\.json of org/name is not in the local Hub cache and offline mode is on"
    ):
        hub._hub_download("org/name", "config.json", True, None, None, True, None, "", False)


def test_resolve_folder_refuses_a_file_or_missing_path_and_passes_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "weights").write_text("x")
    for name in (str(tmp_path / "weights"), str(tmp_path / "missing")):
        with pytest.raises(
            FileMissingError, match=rf"^folder {name} does not exist; pass a folder with config\.json or a Hub repo id$"
        ):
            hub.resolve_folder(name)
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder(calls, str(tmp_path)))
    hub.resolve_folder("org/name", cache_dir="/my/cache")
    assert calls[0]["cache_dir"] == "/my/cache"


def test_resolve_folder_token_offline_message_and_trailing_slash_paths(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub._looks_like_path("org/name/") is True  # two slashes: a path, not a repo id
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder(calls, str(tmp_path)))
    hub.resolve_folder("org/name", token="tok")
    assert calls[0]["token"] == "tok"
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder([], hub_errors.LocalEntryNotFoundError("no")))
    with pytest.raises(FileMissingError) as info:
        hub.resolve_folder("org/name", local_files_only=True)
    assert str(info.value) == (
        "org/name is not in the local Hub cache and could not be downloaded: offline mode is on (HF_HUB_OFFLINE=1 "
        "or local_files_only=True). Download it where there is network (hf download org/name) or pass a local folder."
    )


def test_resolve_folder_names_other_hub_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder([], OSError("disk full")))
    with pytest.raises(FileMissingError, match=r"^could not get org/name from the Hub: disk full$"):
        hub.resolve_folder("org/name")


def test_atomic_write_mode_follows_the_umask_and_the_temporary_file_is_beside_the_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import os

    target = tmp_path / "config.json"
    replaced: list[tuple[str, Path]] = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: replaced.append((src, dst)) or real_replace(src, dst))
    old = os.umask(0o022)
    try:
        hub.atomic_write_bytes(target, b"{}")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"{}" and target.stat().st_mode & 0o777 == 0o644
    assert Path(replaced[0][0]).parent == tmp_path  # renamed within the folder: atomic, same file system


def test_a_failed_atomic_write_removes_its_temporary_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    def fail(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="^disk gone$"):
        hub.atomic_write_bytes(tmp_path / "config.json", b"{}")
    assert list(tmp_path.iterdir()) == []


class _Unreadable:
    def __init__(self, _: str) -> None:
        pass

    def read_text(self) -> str:
        raise OSError("no /proc")


def test_umask_without_proc_asks_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    current = os.umask(0o022)
    os.umask(current)
    monkeypatch.setattr(hub, "Path", _Unreadable)
    assert hub.umask() == current


def test_use_auth_token_becomes_token() -> None:
    assert hub.split_hub_kwargs({"use_auth_token": "t", "x": 1}) == ({"token": "t"}, {"x": 1})


def test_resolve_file_messages_and_hub_arguments(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(FileMissingError, match=r"re-save the model with save_pretrained or copy the file there\.$"):
        hub.resolve_file(tmp_path, "config.json")
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        FileMissingError, match=rf"^{tmp_path / 'file'} is a file; pass the folder that contains config\.json instead$"
    ):
        hub.resolve_file(tmp_path / "file", "config.json")
    calls: list[tuple] = []
    monkeypatch.setattr(hub, "_hub_download", lambda *args: calls.append(args))
    hub.resolve_file("org/name", "config.json")
    hub.resolve_file(
        "org/name",
        "c.json",
        required=False,
        revision="r",
        cache_dir="/c",
        local_files_only=True,
        token="t",
        subfolder="s",
        force_download=True,
    )
    assert calls == [
        ("org/name", "config.json", True, None, None, False, None, "", False),
        ("org/name", "c.json", False, "r", "/c", True, "t", "s", True),
    ]


def test_hub_download_error_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    snapshots: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _recorder(snapshots, OSError("no")))

    def fails_with(exc: Exception, offline: bool = False, revision: str | None = None) -> str:
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", _recorder([], exc))
        with pytest.raises(FileMissingError) as info:
            hub._hub_download("org/name", "config.json", True, revision, "/c", offline, None, "", False)
        return str(info.value)

    local = hub_errors.LocalEntryNotFoundError("not cached")
    assert "(HF_HUB_OFFLINE=1 or local_files_only=True). Download it while online (hf download org/name)" in fails_with(
        local, True
    )
    assert fails_with(local) == (
        "could not download config.json of org/name and it is not cached: not cached. Check the network, or set "
        "HF_HUB_OFFLINE=1 and pass a local folder."
    )
    assert fails_with(_no_response(hub_errors.RepositoryNotFoundError)) == (
        "'org/name' is neither a local folder nor a Hub repo you can access; check the name or pass token=..."
    )
    assert fails_with(_no_response(hub_errors.RevisionNotFoundError), revision="v9") == (
        "revision 'v9' does not exist in Hub repo org/name"
    )
    assert fails_with(ValueError("bad")) == "could not get config.json of org/name: bad"
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _recorder([], local))
    with pytest.raises(FileMissingError):
        hub._hub_download("org/name", "x.json", False, "v1", "/c", True, None, "", False)
    assert (
        snapshots[-1]["args"] == ("org/name",)
        and snapshots[-1]["revision"] == "v1"
        and snapshots[-1]["cache_dir"] == "/c"
    )

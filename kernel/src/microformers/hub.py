"""Finding files: a local folder, a model alias, or a Hub repository (through ``huggingface_hub``).

Also the one place files are written: ``atomic_write_*`` write to a temporary file beside the
target and rename it into place, so a failed write never leaves a half-written file; ``staged_folder``
(every save uses it; implemented in :mod:`microformers.staging`) swaps a whole folder in.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import FileMissingError
from .staging import staged_folder as staged_folder  # the atomic folder swap, re-exported here for plugins

HUB_KWARGS = ("revision", "cache_dir", "local_files_only", "token", "subfolder", "force_download", "proxies")


def split_hub_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate file-resolution arguments from everything else."""
    hub = {k: kwargs[k] for k in HUB_KWARGS if k in kwargs}
    rest = {k: v for k, v in kwargs.items() if k not in HUB_KWARGS}
    if "use_auth_token" in rest:
        hub["token"] = rest.pop("use_auth_token")
    return hub, rest


def is_offline(local_files_only: bool = False) -> bool:
    return bool(local_files_only) or os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or os.sep in name.strip("/").replace("/", "", 1) or name.count("/") > 1


def resolve_file(
    pretrained: str | os.PathLike[str],
    filename: str,
    *,
    required: bool = True,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    local_files_only: bool = False,
    token: str | bool | None = None,
    subfolder: str = "",
    force_download: bool = False,
    **_: Any,
) -> Path | None:
    """The local path of ``filename`` in a folder or Hub repo; ``None`` if absent and not ``required``."""
    name = str(pretrained)
    folder = Path(name).expanduser()
    if folder.is_dir():
        path = folder / subfolder / filename
        if path.is_file():
            return path
        if required:
            raise FileMissingError(
                f"{filename} not found in folder {folder / subfolder}. The folder must contain {filename}; "
                "re-save the model with save_pretrained or copy the file there."
            )
        return None
    if folder.is_file():
        raise FileMissingError(f"{name} is a file; pass the folder that contains {filename} instead")
    if _looks_like_path(name):
        raise FileMissingError(f"folder {name} does not exist; check the path (it is not a Hub repo id either)")
    return _hub_download(
        name, filename, required, revision, cache_dir, local_files_only, token, subfolder, force_download
    )


def _hub_download(
    repo_id: str,
    filename: str,
    required: bool,
    revision: str | None,
    cache_dir: Any,
    local_files_only: bool,
    token: Any,
    subfolder: str,
    force_download: bool,
) -> Path | None:
    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    offline = is_offline(local_files_only)
    where = f"{repo_id}{'@' + revision if revision else ''}"
    try:
        path = huggingface_hub.hf_hub_download(
            repo_id,
            filename,
            subfolder=subfolder or None,
            revision=revision,
            cache_dir=cache_dir,
            local_files_only=offline,
            token=token,
            force_download=force_download,
        )
        return Path(path)
    except hub_errors.LocalEntryNotFoundError as exc:
        if not required and _cached_snapshot_exists(repo_id, revision, cache_dir):
            return None
        if offline:
            raise FileMissingError(
                f"{filename} of {where} is not in the local Hub cache and offline mode is on "
                "(HF_HUB_OFFLINE=1 or local_files_only=True). Download it while online "
                f"(hf download {repo_id}), or pass a local folder that contains it."
            ) from exc
        raise FileMissingError(
            f"could not download {filename} of {where} and it is not cached: {exc}. Check the network, or set "
            "HF_HUB_OFFLINE=1 and pass a local folder."
        ) from exc
    except hub_errors.EntryNotFoundError as exc:
        if required:
            raise FileMissingError(f"{filename} is not in Hub repo {where}: {exc}") from exc
        return None
    except hub_errors.RepositoryNotFoundError as exc:
        raise FileMissingError(
            f"'{repo_id}' is neither a local folder nor a Hub repo you can access; check the name or pass token=..."
        ) from exc
    except hub_errors.RevisionNotFoundError as exc:
        raise FileMissingError(f"revision '{revision}' does not exist in Hub repo {repo_id}") from exc
    except (OSError, ValueError) as exc:
        raise FileMissingError(f"could not get {filename} of {where}: {exc}") from exc


def _cached_snapshot_exists(repo_id: str, revision: str | None, cache_dir: Any) -> bool:
    try:
        import huggingface_hub

        huggingface_hub.snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True)
        return True
    except Exception:
        return False


def resolve_folder(
    pretrained: str | os.PathLike[str],
    allow_patterns: list[str] | None = None,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    local_files_only: bool = False,
    token: str | bool | None = None,
    subfolder: str = "",
    **_: Any,
) -> Path:
    """A local folder holding the model: the folder itself, or a Hub snapshot of the allowed files."""
    name = str(pretrained)
    folder = Path(name).expanduser()
    if folder.is_dir():
        return folder / subfolder
    if folder.is_file() or _looks_like_path(name):
        raise FileMissingError(f"folder {name} does not exist; pass a folder with config.json or a Hub repo id")
    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    patterns = [f"{subfolder}/{p}" if subfolder else p for p in allow_patterns] if allow_patterns else None
    try:
        snapshot = huggingface_hub.snapshot_download(
            name,
            revision=revision,
            cache_dir=cache_dir,
            local_files_only=is_offline(local_files_only),
            token=token,
            allow_patterns=patterns,
        )
    except hub_errors.RepositoryNotFoundError as exc:
        raise FileMissingError(f"'{name}' is neither a local folder nor an accessible Hub repo") from exc
    except hub_errors.LocalEntryNotFoundError as exc:
        why = (
            "offline mode is on (HF_HUB_OFFLINE=1 or local_files_only=True)"
            if is_offline(local_files_only)
            else f"the Hub could not be reached ({exc})"
        )
        raise FileMissingError(
            f"{name} is not in the local Hub cache and could not be downloaded: {why}. Download it where there is "
            f"network (hf download {name}) or pass a local folder."
        ) from exc
    except (OSError, ValueError) as exc:
        raise FileMissingError(f"could not get {name} from the Hub: {exc}") from exc
    return Path(snapshot) / subfolder


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary file renamed over it (mode 0666 minus the umask, like ``open``)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def umask() -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask

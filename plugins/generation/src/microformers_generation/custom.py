"""``custom_generate``: run generation code that is not one of the installed strategies.

A string names either a registered strategy, or a folder (local, or a Hub repository) holding
``custom_generate/generate.py`` whose ``generate(model, **generate_arguments)`` replaces
``generate`` entirely. Running such a file requires ``trust_remote_code=True``; its optional
``custom_generate/requirements.txt`` is checked with ``packaging`` before anything is imported.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import FileMissingError, GenerationError, RemoteCodeError
from ..plugins import registry
from ..remote import NAMESPACE, check_requirements, import_isolated

GENERATE_FILE = "custom_generate/generate.py"
REQUIREMENTS_FILE = "custom_generate/requirements.txt"

_loaded: dict[tuple[str, float], ModuleType] = {}


def resolve_custom_generate(
    value: str | os.PathLike[str], trust_remote_code: bool | None, hub_kwargs: dict[str, Any]
) -> tuple[str, Any]:
    """``("strategy", strategy)`` for a registered name, ``("function", generate)`` for a folder."""
    name = os.fspath(value)
    folder = Path(name).expanduser()
    if folder.is_dir():
        return "function", load_generate_function(folder, trust_remote_code, origin=name)
    registration = registry.get("generation_strategies", name)
    if registration is not None:
        return "strategy", registration.load()
    installed = ", ".join(map(str, registry.names("generation_strategies"))) or "none"
    if isinstance(value, os.PathLike) or name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise GenerationError(
            f"custom_generate={name!r} is neither an installed generation strategy (installed: {installed}) "
            f"nor an existing folder containing {GENERATE_FILE}"
        )
    from ..hub import resolve_folder

    try:
        downloaded = resolve_folder(name, ["custom_generate/*"], **hub_kwargs)
    except FileMissingError as exc:
        raise GenerationError(
            f"custom_generate={name!r} is not an installed generation strategy (installed: {installed}), not a "
            f"local folder, and could not be fetched as a Hub repository: {exc}"
        ) from exc
    return "function", load_generate_function(Path(downloaded), trust_remote_code, origin=name)


def load_generate_function(folder: Path, trust_remote_code: bool | None, origin: str) -> Callable[..., Any]:
    """The ``generate`` function of ``folder/custom_generate/generate.py`` (consent and requirements checked)."""
    path = folder / GENERATE_FILE
    if not path.is_file():
        raise GenerationError(
            f"custom_generate={origin!r}: {path} does not exist; a custom generation folder needs "
            f"{GENERATE_FILE} defining generate(model, **kwargs)"
        )
    if trust_remote_code is not True:
        raise RemoteCodeError(
            f"custom_generate={origin!r} would run the code in {path}, which replaces generate(). Read it, and "
            "if you trust it pass trust_remote_code=True to generate()."
        )
    check_requirements(folder / REQUIREMENTS_FILE)
    module = _import_folder_module(path)
    function = getattr(module, "generate", None)
    if not callable(function):
        raise RemoteCodeError(f"{path} does not define a function generate(model, **kwargs)")
    return function


def _import_folder_module(path: Path) -> ModuleType:
    key = (str(path.resolve()), path.stat().st_mtime)
    module = _loaded.get(key)
    if module is None:
        # A private package per folder, so generate.py can import its sibling files relatively.
        package = f"{NAMESPACE}.custom_generate_{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}"
        module = import_isolated(package, path.parent, path.stem, {path.name: path})
        _loaded[key] = module
    return module

"""``custom_generate``: run generation code that is not one of the installed strategies.

A string names either a registered strategy, or a folder (local, or a Hub repository) holding
``custom_generate/generate.py`` whose ``generate(model, **generate_arguments)`` replaces
``generate`` entirely. Running such a file requires ``trust_remote_code=True``; its optional
``custom_generate/requirements.txt`` is checked with ``packaging`` before anything is imported.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import FileMissingError, GenerationError, RemoteCodeError
from ..plugins import registry

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


def check_requirements(path: Path) -> None:
    """Raise :class:`RemoteCodeError` listing every requirement in ``path`` the environment does not meet."""
    if not path.is_file():
        return
    from packaging.requirements import InvalidRequirement, Requirement

    problems: list[str] = []
    for line_number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            problems.append(f"line {line_number} {line!r} is not a valid requirement ({exc})")
            continue
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{line} (not installed)")
            continue
        if requirement.specifier and not requirement.specifier.contains(installed, prereleases=True):
            problems.append(f"{line} (installed: {installed})")
    if problems:
        raise RemoteCodeError(
            f"{path} lists requirements this environment does not meet: {'; '.join(problems)}. "
            "Install them (pip install " + " ".join(repr(p.split(" (")[0]) for p in problems) + ") and retry."
        )


def _import_folder_module(path: Path) -> ModuleType:
    key = (str(path.resolve()), path.stat().st_mtime)
    module = _loaded.get(key)
    if module is not None:
        return module
    # A private package per folder, so generate.py can import its sibling files relatively.
    package_name = "microformers_custom_generate_" + hashlib.sha256(key[0].encode()).hexdigest()[:16]
    package = ModuleType(package_name)
    package.__path__ = [str(path.parent)]
    sys.modules[package_name] = package
    spec = importlib.util.spec_from_file_location(f"{package_name}.generate", path)
    if spec is None or spec.loader is None:
        raise RemoteCodeError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(spec.name, None)
        raise RemoteCodeError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    _loaded[key] = module
    return module

"""Code that ships with a model folder (``auto_map`` in ``config.json``), run only with consent.

What runs: the module an ``auto_map`` entry names plus every module of the folder it imports
relatively, nothing else. When: only if the caller passed ``trust_remote_code=True``; it is never
implied. How it is isolated: each folder/revision/content is imported as its own private package
(``microformers_remote_code.<name>_<digest>``), so two folders with a ``modeling.py`` each do not
collide and nothing appears in ``sys.modules`` under a bare name. Before anything runs: the
folder's ``requirements.txt`` is checked, and the SHA-256 of every file is recorded (``CODE_DIGESTS``)
and compared with ``code_sha256={file: digest}`` when given. A failed import leaves no module behind.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.metadata
import inspect
import re
import shutil
import sys
import types
from pathlib import Path
from typing import Any

from .errors import RemoteCodeError
from .hub import resolve_file

NAMESPACE = "microformers_remote_code"

# path of every code file microformers ran -> its SHA-256
CODE_DIGESTS: dict[str, str] = {}


def split_reference(reference: str | list[str | None]) -> tuple[str | None, str, str]:
    """``"repo--module.Class"`` / ``"module.Class"`` -> (repo or None, module, Class)."""
    if isinstance(reference, (list, tuple)):
        reference = next((r for r in reversed(reference) if r), "")
    repo, _, rest = str(reference).rpartition("--")
    module, _, class_name = rest.rpartition(".")
    if not module or not class_name:
        raise RemoteCodeError(f"auto_map entry {reference!r} is not of the form 'module.ClassName'")
    return repo or None, module, class_name


def _relative_imports(source: str, path: Path) -> list[str]:
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise RemoteCodeError(
            f"{path} has a syntax error at line {exc.lineno}: {exc.msg}. Nothing from this folder was run."
        ) from exc
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                modules.append(node.module.split(".")[0])
            else:
                modules.extend(alias.name for alias in node.names)
    return modules


def collect_code_files(module: str, source: Any, hub_kwargs: dict[str, Any]) -> dict[str, Path]:
    """Every ``.py`` file that importing ``module`` would run: ``{file name: local path}``."""
    files: dict[str, Path] = {}
    pending = [module]
    while pending:
        name = pending.pop()
        file_name = f"{name.replace('.', '/')}.py"
        if file_name in files:
            continue
        path = resolve_file(source, file_name, required=len(files) == 0, **hub_kwargs)
        if path is None:  # a relative import of a sibling that is not a file (e.g. a package attribute)
            continue
        files[file_name] = path
        pending.extend(_relative_imports(path.read_text(encoding="utf-8"), path))
    return files


def check_requirements(path: Path) -> None:
    """Refuse to run code whose ``requirements.txt`` (at ``path``) is not satisfied, listing every problem."""
    from packaging.requirements import InvalidRequirement, Requirement

    if not path.is_file():
        return
    problems = []
    for line_number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            problems.append(f"line {line_number} '{line}' is not a valid requirement ({exc})")
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            installed = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{line} (not installed)")
            continue
        if req.specifier and not req.specifier.contains(installed, prereleases=True):
            problems.append(f"{line} (installed: {installed})")
    if problems:
        raise RemoteCodeError(
            f"{path} lists requirements that are not met: {'; '.join(problems)}. "
            f"Install them (pip install -r {path}) before loading; no code from the folder was run."
        )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_remote_class(
    reference: str | list[str | None],
    pretrained: Any,
    trust_remote_code: bool | None,
    hub_kwargs: dict[str, Any],
    code_options: dict[str, Any],
    kind: str,
    auto_map: dict[str, Any] | None = None,
) -> type:
    """Import the class an ``auto_map`` entry names, after consent, requirement and digest checks."""
    repo, module, class_name = split_reference(reference)
    source = repo or pretrained
    hub_kwargs = dict(hub_kwargs)
    if code_options.get("code_revision"):
        hub_kwargs["revision"] = code_options["code_revision"]
    files = collect_code_files(module, source, hub_kwargs)
    if trust_remote_code is not True:
        would_run = dict(files)
        for other in (auto_map or {}).values():
            other_repo, other_module, _ = split_reference(other)
            if other_repo == repo:
                would_run.update(collect_code_files(other_module, source, hub_kwargs))
        listing = ", ".join(str(p) for p in sorted(would_run.values()))
        raise RemoteCodeError(
            f"{source} contains custom code for {kind} ({reference}); loading it would run: {listing}. "
            "Read these files, then pass trust_remote_code=True to allow it (pin it with revision=<commit> "
            "and code_sha256={file: sha256}). microformers never runs model code without that consent."
        )
    digests = {name: _digest(path) for name, path in files.items()}
    pinned: dict[str, str] | None = code_options.get("code_sha256")
    if pinned is not None:
        for name, path in files.items():
            expected = pinned.get(name) or pinned.get(str(path))
            if expected is None:
                raise RemoteCodeError(
                    f"{path} would run but is not pinned in code_sha256; add '{name}': '{digests[name]}' after "
                    "reviewing it"
                )
            if expected.lower() != digests[name]:
                raise RemoteCodeError(
                    f"{path} has SHA-256 {digests[name]}, but code_sha256 expects {expected}; the code changed "
                    "since you reviewed it. Nothing was run."
                )
    folder = next(iter(files.values())).parent
    check_requirements(folder / "requirements.txt")
    revision = hub_kwargs.get("revision") or ""
    identity = hashlib.sha256((str(source) + "@" + revision + "".join(sorted(digests.values()))).encode()).hexdigest()[
        :16
    ]
    package = f"{NAMESPACE}.{re.sub(r'[^0-9a-zA-Z_]', '_', Path(str(source)).name)}_{identity}"
    module_obj = import_isolated(package, folder, module, files)
    CODE_DIGESTS.update({str(path): digests[name] for name, path in files.items()})
    cls = getattr(module_obj, class_name, None)
    if not isinstance(cls, type):
        defined = sorted(
            n for n, v in vars(module_obj).items() if isinstance(v, type) and v.__module__ == module_obj.__name__
        )
        _forget(package)
        raise RemoteCodeError(
            f"auto_map names {module}.{class_name}, but {files[f'{module}.py']} defines no class {class_name} "
            f"(it defines: {', '.join(defined) or 'none'}). Fix auto_map in config.json."
        )
    cls._microformers_code_sha256 = dict(digests)
    return cls


def _ensure_namespace() -> None:
    if NAMESPACE not in sys.modules:
        root = types.ModuleType(NAMESPACE)
        root.__path__ = []
        sys.modules[NAMESPACE] = root


def import_isolated(package: str, folder: Path, module: str, files: dict[str, Path]) -> types.ModuleType:
    """Import ``folder/module.py`` as ``package.module`` (a private package); undo everything on failure."""
    if f"{package}.{module}" in sys.modules:
        return sys.modules[f"{package}.{module}"]
    _ensure_namespace()
    pkg = types.ModuleType(package)
    pkg.__path__ = [str(folder)]
    pkg.__package__ = package
    sys.modules[package] = pkg
    try:
        return importlib.import_module(f"{package}.{module}")
    except SyntaxError as exc:
        _forget(package)
        raise RemoteCodeError(f"{exc.filename} has a syntax error at line {exc.lineno}: {exc.msg}") from exc
    except Exception as exc:
        _forget(package)
        raise RemoteCodeError(
            f"importing {files.get(f'{module}.py', folder)} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _forget(package: str) -> None:
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    importlib.invalidate_caches()


# -- saving custom code --------------------------------------------------------------------------
def auto_class_reference(cls: type) -> str:
    return f"{cls.__module__.rpartition('.')[2]}.{cls.__name__}"


def write_custom_code(obj: Any, config: Any, folder: Path) -> None:
    """For classes registered with ``register_for_auto_class``: fill ``auto_map`` and copy their code."""
    classes = []
    config_auto = getattr(type(config), "_auto_class", None)
    if config_auto:
        classes.append((config_auto, type(config)))
    model_auto = getattr(type(obj), "_auto_class", None) if obj is not config else None
    if model_auto:
        classes.append((model_auto, type(obj)))
    if not classes:
        return
    auto_map = dict(getattr(config, "auto_map", None) or {})
    for auto_name, cls in classes:
        auto_map[auto_name] = auto_class_reference(cls)
        source_file = Path(inspect.getfile(cls))
        for name, path in collect_code_files(source_file.stem, source_file.parent, {}).items():
            shutil.copyfile(path, folder / name)
    config.auto_map = auto_map


class RegisterForAutoClass:
    """Mixin giving config and model classes ``register_for_auto_class``."""

    _auto_class: str | None = None

    @classmethod
    def register_for_auto_class(cls, auto_class: str = "AutoModel") -> None:
        if not isinstance(auto_class, str):
            auto_class = auto_class.__name__
        cls._auto_class = auto_class

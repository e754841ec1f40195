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
import importlib.abc
import importlib.machinery
import importlib.metadata
import inspect
import re
import shutil
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

from .errors import MicroformersError, RemoteCodeError
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


def _relative_imports(source: bytes, path: Path, package: str) -> list[str]:
    """Modules of the folder (dotted, relative to its root) that ``source`` imports relatively, with parents."""
    try:
        tree = ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError) as exc:
        where = f" at line {exc.lineno}: {exc.msg}" if isinstance(exc, SyntaxError) else f": {exc}"
        raise RemoteCodeError(f"{path} has a syntax error{where}. It was not run; fix the file.") from exc
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = package.split(".") if package else []
            base = parts[: len(parts) - node.level + 1] if node.level - 1 <= len(parts) else None
            if base is None:
                continue  # beyond the folder: nothing of the folder can be imported that way
            target = base + (node.module.split(".") if node.module else [])
            modules.extend(".".join(target[:i]) for i in range(1, len(target) + 1))
            modules.extend(".".join([*target, alias.name]) for alias in node.names if alias.name != "*")
    return modules


def _module_file(source: Any, dotted: str, hub_kwargs: dict[str, Any], required: bool) -> tuple[str, Path] | None:
    base = dotted.replace(".", "/")
    for file_name in (f"{base}/__init__.py", f"{base}.py"):
        path = resolve_file(source, file_name, required=required and file_name.endswith(f"{base}.py"), **hub_kwargs)
        if path is not None:
            return file_name, path
    return None


def collect_code_files(module: str, source: Any, hub_kwargs: dict[str, Any]) -> dict[str, Path]:
    """Every ``.py`` file that importing ``module`` would run, nested packages included: ``{file name: path}``.

    Only these files can be imported from the folder's private package (see ``_ReviewedCode``): a dynamic
    import of any other module of the folder fails, so the digests cover everything that can run.
    """
    files: dict[str, Path] = {}
    parts = module.split(".")
    pending = [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)] + [module]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        found = _module_file(source, name, hub_kwargs, required=name == module)
        if found is None:  # a name that is not a file (a package attribute, or a folder without __init__.py)
            continue
        file_name, path = found
        files[file_name] = path
        package = name if file_name.endswith("/__init__.py") else name.rpartition(".")[0]
        pending.extend(_relative_imports(path.read_bytes(), path, package))
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
            f"Install them (pip install -r {path}) before loading; the code that needs them was not run."
        )


def _code_pins(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    ok = isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-fA-F]{64}", v) for k, v in value.items()
    )
    if not ok:
        raise RemoteCodeError(
            f"code_sha256 must be a dict {{file name: 64-character hex SHA-256 string}}, got {value!r:.200}. "
            "Example: code_sha256={'modeling_x.py': '<sha256>'}; a loaded class lists its digests in "
            "_microformers_code_sha256."
        )
    return {k: v.lower() for k, v in value.items()}


def _ran_note(folder: Path) -> str:
    ran = sorted(p for p in CODE_DIGESTS if folder in Path(p).parents)
    if not ran:
        return "No code from this folder has run."
    return f"Code of this folder that ran earlier in this process (loaded with consent): {', '.join(ran)}."


def _check_pins(pinned: dict[str, str], files: dict[str, Path], sources: dict[str, bytes], folder: Path) -> None:
    for name, path in files.items():
        digest = hashlib.sha256(sources[name]).hexdigest()
        expected = pinned.get(name) or pinned.get(str(path))
        if expected is not None and expected != digest:
            raise RemoteCodeError(
                f"{path} has SHA-256 {digest}, but code_sha256 expects {expected}: the code changed since you "
                f"reviewed it. It was not run. {_ran_note(folder)}"
            )


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
    pinned = _code_pins(code_options.get("code_sha256"))
    try:
        files = collect_code_files(module, source, hub_kwargs)
        module_file = _module_file(source, module, hub_kwargs, required=True)[1]  # type: ignore[index]
    except RemoteCodeError:
        raise
    except MicroformersError as exc:  # the same error type, saying which setting named the file
        raise type(exc)(
            f"auto_map entry {reference!r} in config.json names module '{module}': {exc} Or fix auto_map in "
            "config.json."
        ) from exc
    folder = module_file.parents[module.count(".") + module_file.name.endswith("__init__.py")]
    would_run = dict(files)  # every file any auto_map entry of this folder would run
    for other in (auto_map or {}).values():
        other_repo, other_module, _ = split_reference(other)
        if other_repo == repo and other_module != module:
            try:
                would_run.update(collect_code_files(other_module, source, hub_kwargs))
            except MicroformersError:
                if trust_remote_code is not True:
                    raise  # a broken entry that is not loaded now only matters for the listing
    if trust_remote_code is not True:
        listing = ", ".join(str(p) for p in sorted(would_run.values()))
        raise RemoteCodeError(
            f"{source} contains custom code for {kind} ({reference}); loading it would run: {listing}. "
            "Read these files, then pass trust_remote_code=True to allow it (pin it with revision=<commit> "
            "and code_sha256={file: sha256}). microformers never runs model code without that consent."
        )
    sources = {name: path.read_bytes() for name, path in files.items()}
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in sources.items()}
    if pinned is not None:
        for name, path in files.items():
            if (pinned.get(name) or pinned.get(str(path))) is None:
                raise RemoteCodeError(
                    f"{path} would run but is not pinned in code_sha256; add '{name}': '{digests[name]}' after "
                    f"reviewing it. It was not run. {_ran_note(folder)}"
                )
        _check_pins(pinned, files, sources, folder)
        # the other auto_map entries' files too, so a changed model file is refused before the config code runs
        _check_pins(pinned, would_run, {n: p.read_bytes() for n, p in would_run.items()}, folder)
    check_requirements(folder / "requirements.txt")
    revision = hub_kwargs.get("revision") or ""
    identity = hashlib.sha256((str(source) + "@" + revision + "".join(sorted(digests.values()))).encode()).hexdigest()[
        :16
    ]
    package = f"{NAMESPACE}.{re.sub(r'[^0-9a-zA-Z_]', '_', Path(str(source)).name)}_{identity}"
    module_obj = import_isolated(package, folder, module, files, sources)
    CODE_DIGESTS.update({str(path): digests[name] for name, path in files.items()})
    cls = getattr(module_obj, class_name, None)
    if not isinstance(cls, type):
        defined = sorted(
            n for n, v in vars(module_obj).items() if isinstance(v, type) and v.__module__ == module_obj.__name__
        )
        _forget(package)
        raise RemoteCodeError(
            f"auto_map names {module}.{class_name}, but {module_file} defines no class {class_name} "
            f"(it defines: {', '.join(defined) or 'none'}). Fix auto_map in config.json."
        )
    cls._microformers_code_sha256 = dict(digests)
    if getattr(cls, "_auto_class", "") is None:  # as the reference: save_pretrained copies the code back
        cls.register_for_auto_class(kind)
    return cls


def _ensure_namespace() -> None:
    if NAMESPACE not in sys.modules:
        root = types.ModuleType(NAMESPACE)
        root.__path__ = []
        sys.modules[NAMESPACE] = root
    if not any(isinstance(f, _ReviewedCode) for f in sys.meta_path):
        sys.meta_path.insert(0, _ReviewedCode())


class _ReviewedCode(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a private package's modules from the exact bytes that were hashed, and nothing else.

    Packages get an empty ``__path__``, so no other finder can import a file of the folder (another
    ``.py``, a stale ``__pycache__`` entry, an extension module beside the source).
    """

    packages: ClassVar[dict[str, tuple[Path, dict[str, tuple[Path | None, bytes | None]]]]] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        package = ".".join(fullname.split(".")[:2])
        if package == fullname or package not in self.packages:
            return None
        folder, modules = self.packages[package]
        relative = fullname[len(package) + 1 :]
        if relative not in modules:
            raise ImportError(
                f"{fullname}: {folder} may only import the code files that were listed, hashed and consented to "
                f"({', '.join(sorted(str(p) for p, _ in modules.values() if p)) or 'none'}); a dynamic import of "
                "any other module of the folder is blocked",
                name=fullname,
            )
        origin = modules[relative][0]
        is_package = origin is None or origin.name == "__init__.py"
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=origin and str(origin), is_package=is_package)
        spec.has_location = origin is not None
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        package = ".".join(module.__name__.split(".")[:2])
        origin, source = self.packages[package][1][module.__name__[len(package) + 1 :]]
        if source is not None:
            exec(compile(source, str(origin), "exec", dont_inherit=True), module.__dict__)


def import_isolated(
    package: str, folder: Path, module: str, files: dict[str, Path], sources: dict[str, bytes] | None = None
) -> types.ModuleType:
    """Import ``folder/module.py`` as ``package.module`` (a private package); undo everything on failure.

    Only ``module`` and the files it imports relatively can be imported, from ``sources`` (the bytes that
    were hashed) when given.
    """
    if f"{package}.{module}" in sys.modules:
        return sys.modules[f"{package}.{module}"]
    if sources is None:
        files = {**collect_code_files(module, folder, {}), **files}
        sources = {name: path.read_bytes() for name, path in files.items()}
    modules: dict[str, tuple[Path | None, bytes | None]] = {}
    for name, path in files.items():
        dotted = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        modules[dotted] = (path, sources[name])
        parts = dotted.split(".")
        for i in range(1, len(parts)):  # folders without __init__.py: empty namespace packages
            modules.setdefault(".".join(parts[:i]), (None, None))
    _ensure_namespace()
    _ReviewedCode.packages[package] = (folder, modules)
    pkg = types.ModuleType(package)
    pkg.__path__ = []
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
    _ReviewedCode.packages.pop(package, None)
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
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
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

"""Layering, enforced: who may import whom among the distributions of this repository.

The rule (``PRODUCT.md``, "Rules of the kernel"):

* the kernel (``microformers``) imports nothing above it: no first-party distribution at all;
* the SDK (``microformers-sdk``) imports only the kernel;
* a plugin imports the kernel, the SDK and the first-party distributions it declares in its
  ``pyproject.toml`` ``[project] dependencies`` (the SDK and the kernel included) or in one of its extras
  (``[project.optional-dependencies]``: imported lazily, where the feature needs it) — also for names
  it takes through ``from microformers import X`` (or ``microformers.X``) where ``X`` is contributed by
  another plugin's ``register_exports`` hook, and for ``"module:Name"`` references it registers;
* third-party imports are the standard library or a distribution declared by the importer, by one of
  its extras, or by a first-party distribution it declares (``torch`` through ``microformers``);
* ``transformers`` and ``peft`` are test oracles only: runtime code never imports them.

Everything is read statically with :mod:`ast` — every ``import`` and ``from ... import`` anywhere in a
module (function-local ones and ``if TYPE_CHECKING:`` blocks included), ``importlib.import_module`` /
``__import__`` with a literal name, and attribute access on an imported ``microformers`` module. No
plugin is imported. The name → distribution map of ``from microformers import X`` comes from the kernel's
``__init__.py`` (its own names and submodules) and from each plugin's ``register_exports`` hook, whose
body is evaluated on the plugin module's literal constants only.

What is *not* a dependency, and why: a duck-typed protocol. Llama's native decode step reaches the
quant plugin's C++ decoder layer through ``getattr(type(q_proj), "native_decoder_step", None)``
(``microformers_sdk.static_steps.native_decoder_step``, called by the SDK's ``decode_steps`` runner
over the layers ``microformers_llama.modeling_llama`` describes): the SDK defines the protocol, ``microformers_quant``'s
``QuantLinear`` implements it, and Llama only ever sees an object that a quantizer put into its model
at load time. Neither side imports the other, Llama works without the quant plugin installed (plain
``nn.Linear`` has no such attribute and the step is ``None``), so no ``dependencies`` entry is owed —
exactly as the kernel calls plugin objects through ``typing.Protocol`` without importing them.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
KERNEL = "microformers"
SDK = "microformers-sdk"
FORBIDDEN = {"transformers": "the reference implementation", "peft": "the reference PEFT library"}
_REF = re.compile(r"([A-Za-z_]\w*)(?:\.\w+)*:[A-Za-z_]\w*")


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


@dataclass(frozen=True)
class Dist:
    """One distribution of this repository, as its ``pyproject.toml`` and ``src/`` describe it."""

    name: str  # canonical project name
    root: Path
    packages: frozenset[str]  # top-level import names under src/
    requires: frozenset[str]  # canonical names in [project] dependencies
    extras: frozenset[str]  # canonical names in [project.optional-dependencies]

    @property
    def layer(self) -> str:
        return {KERNEL: "kernel", SDK: "sdk"}.get(self.name, "plugin")

    @property
    def pyproject(self) -> str:
        return _shown(self.root / "pyproject.toml")


@dataclass(frozen=True)
class Use:
    """One thing a module takes from a top-level module: ``what`` is shown in reports."""

    file: Path
    line: int
    module: str  # top-level import name
    what: str
    dotted: str = ""  # the module as written (``microformers_gguf.dequant``)
    name: str | None = None  # X of ``from <dotted> import X``
    export: str | None = None  # X of ``from microformers import X`` / ``microformers.X``
    ref: bool = False  # a "module:Name" string, counted only where the module is first-party


@dataclass
class Violation:
    use: Use
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{_shown(self.use.file)}:{self.use.line}: {self.message}\n    fix: {self.fix}"


@dataclass
class Layout:
    dists: dict[str, Dist]
    provider: dict[str, str]  # first-party top-level module -> distribution
    exports: dict[str, str]  # name contributed through register_exports -> distribution
    kernel_names: frozenset[str] = field(default_factory=frozenset)


def _requirement_names(specs: list[str]) -> frozenset[str]:
    return frozenset(canonicalize_name(Requirement(s).name) for s in specs)


def _top_level(src: Path) -> frozenset[str]:
    names = {p.name for p in src.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    names |= {p.stem for p in src.glob("*.py")}
    return frozenset(names)


def _dist_roots() -> list[Path]:
    return [REPO / "kernel", REPO / "sdk", *sorted(p.parent for p in (REPO / "plugins").glob("*/pyproject.toml"))]


def _load_dist(root: Path) -> Dist:
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = [s for group in project.get("optional-dependencies", {}).values() for s in group]
    return Dist(
        name=canonicalize_name(project["name"]),
        root=root,
        packages=_top_level(root / "src"),
        requires=_requirement_names(project.get("dependencies", [])),
        extras=_requirement_names(extras),
    )


@functools.cache
def _public_names(init: Path) -> frozenset[str]:
    """Names a package's ``__init__.py`` binds, lists in ``__all__`` or serves lazily (``_LAZY`` tables)."""
    tree = ast.parse(init.read_text(), str(init))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
            if isinstance(node.value, ast.Dict):  # _LAZY-style tables: name -> submodule
                names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if isinstance(node.value, ast.List | ast.Tuple):  # __all__
                names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return frozenset(n for n in names if not n.startswith("_") or n.startswith("__"))


def _kernel_names(init: Path) -> frozenset[str]:
    """The kernel's public names and its submodules: what ``from microformers import X`` finds in the kernel."""
    pkg = init.parent
    submodules = {p.stem for p in pkg.glob("*.py")} | {p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    return _public_names(init) | submodules


_SAFE_BUILTINS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "dict": dict, "sorted": sorted}


def _exported_names(plugin_py: Path) -> list[str]:
    """The names a plugin's ``register_exports`` hook registers, without importing the plugin.

    The hook's body runs on a namespace of the module's top-level literal constants (``EXPORTS`` tables,
    prefixes) with a recording ``register``; anything else it touches fails this test loudly.
    """
    tree = ast.parse(plugin_py.read_text(), str(plugin_py))
    consts: dict[str, object] = {"__builtins__": _SAFE_BUILTINS}
    hook: ast.FunctionDef | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "register_exports":
            hook = node
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            try:
                value = eval(compile(ast.Expression(node.value), str(plugin_py), "eval"), dict(consts))
            except Exception:  # not a literal table: the hook must not need it
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    consts[target.id] = value
    if hook is None:
        return []
    hook.decorator_list = []
    module = ast.fix_missing_locations(ast.Module(body=[hook], type_ignores=[]))
    namespace = dict(consts)
    exec(compile(module, str(plugin_py), "exec"), namespace)
    names: list[str] = []
    namespace["register_exports"](lambda name, *args, **kwargs: names.append(name))
    return names


@functools.cache
def layout() -> Layout:
    dists = {d.name: d for d in map(_load_dist, _dist_roots())}
    provider = {pkg: d.name for d in dists.values() for pkg in d.packages}
    exports: dict[str, str] = {}
    for d in dists.values():
        for plugin_py in sorted((d.root / "src").glob("*/plugin.py")):
            for name in _exported_names(plugin_py):
                exports.setdefault(name, d.name)
    kernel_names = _kernel_names(REPO / "kernel" / "src" / "microformers" / "__init__.py")
    return Layout(dists, provider, exports, kernel_names)


def _literal_arg(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def uses(path: Path, source: str | None = None) -> Iterator[Use]:
    """Every module (and ``microformers`` name) that the Python file at ``path`` takes, wherever it does."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    nodes = list(ast.walk(tree))
    docstrings = {id(n.value) for n in nodes if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    kernel_aliases = {
        a.asname or a.name for n in nodes if isinstance(n, ast.Import) for a in n.names if a.name == KERNEL
    }
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                yield Use(path, node.lineno, a.name.split(".")[0], f"import {a.name}", dotted=a.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            if node.module == KERNEL:
                for a in node.names:
                    yield Use(path, node.lineno, top, f"from microformers import {a.name}", export=a.name)
            else:
                for a in node.names:
                    what = f"from {node.module} import {a.name}"
                    yield Use(path, node.lineno, top, what, dotted=node.module, name=a.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in kernel_aliases:
            yield Use(path, node.lineno, KERNEL, f"{node.value.id}.{node.attr}", export=node.attr)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            target = _literal_arg(node)
            if called in ("import_module", "__import__") and target and not target.startswith("."):
                yield Use(path, node.lineno, target.split(".")[0], f"{called}({target!r})", dotted=target)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            ref = _REF.fullmatch(node.value)
            if ref:  # a "module:Name" reference, as registered with the plugin hooks
                yield Use(path, node.lineno, ref.group(1), f"registers {node.value!r}", ref=True)


def _sources(dist: Dist) -> Iterator[Path]:
    for pkg in sorted(dist.packages):
        base = dist.root / "src" / pkg
        yield from sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


@functools.cache
def _uses_of(dist: Dist) -> tuple[Use, ...]:
    """Every use in ``dist``'s sources, parsed once for all the tests."""
    return tuple(use for path in _sources(dist) for use in uses(path))


@functools.cache
def _third_party() -> dict[str, frozenset[str]]:
    return {k: frozenset(map(canonicalize_name, v)) for k, v in importlib.metadata.packages_distributions().items()}


def _closure(lay: Layout, dist: Dist) -> set[str]:
    """``dist`` and the first-party distributions it declares, transitively (for third-party imports)."""
    seen, todo = {dist.name}, [dist]
    while todo:
        for req in todo.pop().requires:
            if req in lay.dists and req not in seen:
                seen.add(req)
                todo.append(lay.dists[req])
    return seen


def _owner(lay: Layout, use: Use) -> tuple[str | None, str]:
    """The first-party distribution ``use`` needs (None where none) and a description of why."""
    if use.export is not None:
        if use.export in lay.kernel_names:
            return KERNEL, "the kernel"
        if use.export in lay.exports:
            owner = lay.exports[use.export]
            return owner, f"{use.export} is exported by {owner} (register_exports)"
        return "?", f"no distribution exports {use.export!r}"
    owner = lay.provider.get(use.module)
    return owner, f"{use.module} belongs to {owner}"


def first_party_violations(dist: Dist, lay: Layout | None = None) -> list[Violation]:
    """Imports of first-party distributions that ``dist``'s layer or declared dependencies do not allow."""
    lay = lay or layout()
    found: list[Violation] = []
    for use in _uses_of(dist):
        owner, why = _owner(lay, use)
        if owner is None or owner == dist.name:
            continue
        if owner == "?":
            found.append(Violation(use, f"{use.what}: {why}", "import it from the module that defines it"))
        elif dist.layer == "kernel":
            found.append(
                Violation(
                    use,
                    f"the kernel imports {owner} ({use.what}; {why}): it imports nothing above it",
                    "move the code into the kernel, or let the kernel dispatch to it through a hook",
                )
            )
        elif dist.layer == "sdk" and owner != KERNEL:
            found.append(
                Violation(
                    use,
                    f"the SDK imports {owner} ({use.what}; {why}): it imports only the kernel",
                    "move the code into the SDK, or reach the plugin through a hook or a Protocol",
                )
            )
        elif dist.layer == "plugin" and owner not in dist.requires | dist.extras:
            found.append(
                Violation(
                    use,
                    f"{dist.name} imports {owner} ({use.what}; {why}) without declaring it",
                    f'add "{owner}>=0.1.0" to [project] dependencies (or an extra) in {dist.pyproject}',
                )
            )
        elif dist.layer == "plugin" and lay.dists[owner].layer == "plugin" and not _is_public(use):
            found.append(
                Violation(
                    use,
                    f"{dist.name} reaches into {owner}'s internals ({use.what}): a plugin uses another plugin "
                    f"only through the public names of its package",
                    f"export the name from {use.module}/__init__.py (its _LAZY table) and import it from {use.module}",
                )
            )
    return found


def _is_public(use: Use) -> bool:
    """``from <package> import X`` with X public in the package's ``__init__.py`` (string refs are registrations)."""
    if use.ref or use.export is not None:
        return True
    if use.dotted != use.module or use.name is None:
        return False
    lay = layout()
    return use.name in _public_names(lay.dists[lay.provider[use.module]].root / "src" / use.module / "__init__.py")


def third_party_violations(dist: Dist, lay: Layout | None = None) -> list[Violation]:
    """Third-party imports of ``dist`` that nothing it declares provides (and every transformers/peft import)."""
    lay = lay or layout()
    closure = _closure(lay, dist)
    allowed = set(dist.extras | dist.requires).union(*(lay.dists[d].requires for d in closure - {dist.name}))
    found: list[Violation] = []
    for use in _uses_of(dist):
        top = use.module
        if top in FORBIDDEN:
            found.append(
                Violation(
                    use,
                    f"{dist.name} imports {top}, {FORBIDDEN[top]}: a test oracle, never a runtime dependency",
                    f"implement it in microformers; compare against {top} in tests only",
                )
            )
            continue
        if use.ref or use.export is not None or top in sys.stdlib_module_names or top in lay.provider:
            continue
        providers = _third_party().get(top)
        if providers is None:
            found.append(
                Violation(
                    use,
                    f"{dist.name} imports {top}, which no installed distribution provides",
                    f"declare the distribution that provides {top} in {dist.pyproject}",
                )
            )
        elif not providers & allowed:
            name = sorted(providers)[0]
            found.append(
                Violation(
                    use,
                    f"{dist.name} imports {top} (from {name}) without declaring it",
                    f'add "{name}" to [project] dependencies (or an extra) in {dist.pyproject}',
                )
            )
    return found


def _report(violations: list[Violation]) -> str:
    return f"{len(violations)} layering violation(s):\n" + "\n".join(map(str, violations))


def _dists(layer: str) -> list[str]:
    return [name for name, d in layout().dists.items() if d.layer == layer]


# -- the scanner itself -------------------------------------------------------------------------------


def test_scanner_sees_function_local_imports_microformers_names_and_registered_refs() -> None:
    source = (
        "import microformers as mf\n"
        "def f():\n"
        "    from microformers import TextStreamer\n"
        "    import microformers_gguf.dequant\n"
        "    return mf.Trainer, importlib.import_module('microformers_peft.lora')\n"
        "REF = 'microformers_pipelines.base:Pipeline'\n"
    )
    got = {(u.line, u.module, u.export) for u in uses(REPO / "x.py", source)}
    assert {
        (1, "microformers", None),
        (3, "microformers", "TextStreamer"),
        (4, "microformers_gguf", None),
        (5, "microformers", "Trainer"),
        (5, "microformers_peft", None),
        (6, "microformers_pipelines", None),
    } <= got


def test_checker_reports_undeclared_plugins_internals_and_the_reference(tmp_path: Path) -> None:
    (tmp_path / "src" / "microformers_fake").mkdir(parents=True)
    (tmp_path / "src" / "microformers_fake" / "__init__.py").write_text(
        "from microformers import AutoModel, TextStreamer\n"  # kernel name; generation's, undeclared
        "from microformers_gguf import open_gguf\n"  # declared, public
        "def f():\n"
        "    from microformers_gguf.dequant import dequantize\n"  # declared, internal
        "    import transformers\n"
    )
    fake = Dist(
        "microformers-fake",
        tmp_path,
        frozenset({"microformers_fake"}),
        frozenset({KERNEL, "microformers-gguf"}),
        frozenset(),
    )
    first_party = {(v.use.line, v.use.what) for v in first_party_violations(fake)}
    assert first_party == {
        (1, "from microformers import TextStreamer"),
        (4, "from microformers_gguf.dequant import dequantize"),
    }
    assert [(v.use.line, v.use.module) for v in third_party_violations(fake)] == [(5, "transformers")]


def test_a_plugin_may_import_a_first_party_distribution_its_extra_declares(tmp_path: Path) -> None:
    (tmp_path / "src" / "microformers_fake").mkdir(parents=True)
    (tmp_path / "src" / "microformers_fake" / "__init__.py").write_text(
        "def f():\n    from microformers_gguf import open_gguf\n"
    )
    with_extra = Dist("microformers-fake", tmp_path, frozenset({"microformers_fake"}), frozenset({KERNEL}),
                      frozenset({"microformers-gguf"}))  # fmt: skip
    assert first_party_violations(with_extra) == []
    without = Dist("microformers-fake", tmp_path, frozenset({"microformers_fake"}), frozenset({KERNEL}), frozenset())
    assert [(v.use.line, v.use.what) for v in first_party_violations(without)] == [
        (2, "from microformers_gguf import open_gguf")
    ]


def test_every_distribution_of_the_repository_is_scanned() -> None:
    lay = layout()
    assert {KERNEL, SDK} <= set(lay.dists)
    assert len(_dists("plugin")) == len(list((REPO / "plugins").glob("*/pyproject.toml")))
    for dist in lay.dists.values():
        assert dist.packages, f"{dist.name}: no package under {dist.root / 'src'}"


def test_names_plugins_export_through_microformers_map_to_their_plugin() -> None:
    lay = layout()
    assert lay.exports["TextStreamer"] == "microformers-generation"
    assert lay.exports["ChunkPipeline"] == "microformers-pipelines"
    assert lay.exports["Trainer"] == "microformers-trainer"
    assert lay.exports["Int4Config"] == "microformers-quant"
    assert {"AutoModelForCausalLM", "hookimpl", "PluginError", "errors"} <= lay.kernel_names


# -- the rule -----------------------------------------------------------------------------------------


def test_kernel_imports_no_distribution_above_it() -> None:
    assert not (found := first_party_violations(layout().dists[KERNEL])), _report(found)


def test_sdk_imports_only_the_kernel() -> None:
    assert not (found := first_party_violations(layout().dists[SDK])), _report(found)


@pytest.mark.parametrize("name", _dists("plugin"))
def test_plugin_imports_only_the_distributions_it_declares(name: str) -> None:
    assert not (found := first_party_violations(layout().dists[name])), _report(found)


def test_plugins_declare_the_kernel_they_build_on() -> None:
    missing = [d.pyproject for d in layout().dists.values() if d.layer != "kernel" and KERNEL not in d.requires]
    assert not missing, f'these do not declare "microformers" in [project] dependencies: {missing}'


@pytest.mark.parametrize("name", list(layout().dists))
def test_third_party_imports_are_declared_and_never_the_reference(name: str) -> None:
    assert not (found := third_party_violations(layout().dists[name])), _report(found)


def test_readme_layout_table_lists_every_distribution_and_the_plugins_it_depends_on() -> None:
    """Each row of README.md's layout table: its paths, their distributions, and "depends on" the plugins they declare."""
    lay = layout()
    by_root = {_shown(d.root): d for d in lay.dists.values()}
    seen: set[str] = set()
    problems: list[str] = []
    for row in (REPO / "README.md").read_text().splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) != 3:
            continue
        paths = [p.rstrip("/") for p in re.findall(r"`([^`]+)`", cells[0])]
        dists = [by_root[p] for p in paths if p in by_root]
        if not dists:
            continue
        named = set(re.findall(r"`([^`]+)`", cells[1]))
        if named != {d.name for d in dists}:
            problems.append(
                f"{cells[0]}: distribution column {sorted(named)}, pyproject names {[d.name for d in dists]}"
            )
        note = re.search(r"depends on ((?:`[^`]+`(?:,? and |, )?)+)", cells[2])
        stated = set(re.findall(r"`([^`]+)`", note.group(1))) if note else set()
        declared = {r for d in dists for r in d.requires if r in lay.dists and r not in (KERNEL, SDK)}
        if stated != declared:
            problems.append(
                f"{cells[0]}: README says depends on {sorted(stated)}, pyproject declares {sorted(declared)}"
            )
        seen |= {d.name for d in dists}
    missing = sorted(set(lay.dists) - seen)
    assert not problems and not missing, "README.md layout table:\n" + "\n".join(
        problems + [f"no row for {name}" for name in missing]
    )

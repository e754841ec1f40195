"""Plugin conformance: what every distribution's entry point must satisfy, whatever it provides.

    from microformers_sdk.testing import PluginConformanceTests

    class TestMyPluginConformance(PluginConformanceTests):
        plugin_name = "myplugin"  # the entry-point name in the ``microformers`` group

The checks: the entry point exists; importing its module (and so its package ``__init__``) imports
no torch; it declares ``MICROFORMERS_API_VERSION`` matching the kernel and implements only known hooks
(a misspelled ``register_model`` is named, with the hook it probably meant); discovery loads it without
error; every ``"module:Name"`` it registers resolves; and every generation strategy it registers is (or, registered
as a class, makes without arguments) an object ``generate()`` can call.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import subprocess
import sys
from typing import Any, ClassVar

import microformers
from microformers.plugins import ENTRY_POINT_GROUP, PluginInfo, check_plugin_module

HEAVY_MODULES = ("torch", "transformers", "tokenizers", "safetensors", "numpy")

_IMPORT_PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[2:]))
print(json.dumps(heavy))
"""


def entry_point(plugin_name: str) -> importlib.metadata.EntryPoint:
    """The installed entry point ``plugin_name`` of the ``microformers`` group."""
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == plugin_name]
    names = sorted(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    assert found, f"no entry point '{plugin_name}' in group '{ENTRY_POINT_GROUP}' (installed: {names}); check pyproject"
    return found[0]


def heavy_imports_of(module_name: str, heavy: tuple[str, ...] = ("torch",)) -> list[str]:
    """The ``heavy`` top-level packages a fresh interpreter has loaded after importing ``module_name``."""
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE, module_name, *heavy], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"importing {module_name} failed in a fresh interpreter:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_entry_module_is_light(plugin_name: str, heavy: tuple[str, ...] = ("torch",)) -> None:
    """Importing the entry module (and its package ``__init__``) loads none of ``heavy``."""
    module_name = entry_point(plugin_name).value.partition(":")[0]
    loaded = heavy_imports_of(module_name, heavy)
    assert not loaded, (
        f"importing {module_name} (the '{plugin_name}' entry point) imports {loaded}; plugin discovery must stay "
        "cheap: register 'module:Name' strings and use microformers.lazy_exports in the package __init__"
    )


def check_declaration(plugin_name: str) -> None:
    """API version declared and matching; only known hooks, each marked ``@microformers.hookimpl``."""
    module = entry_point(plugin_name).load()
    try:
        check_plugin_module(module)
    except microformers.PluginError as exc:
        raise AssertionError(f"plugin '{plugin_name}': {exc}") from exc


def discovered(plugin_name: str) -> PluginInfo:
    """The plugin as discovery saw it; fails with its error if it is broken."""
    microformers.registry.discover()
    info = microformers.registry.plugins.get(plugin_name)
    assert info is not None, f"discovery did not find plugin '{plugin_name}'"
    assert not info.broken, f"plugin '{plugin_name}' failed to load: {info.error}"
    return info


def check_registrations_resolve(plugin_name: str) -> None:
    """Every ``"module:Name"`` the plugin registered imports (what the kernel would do on first use)."""
    info = discovered(plugin_name)
    failures: list[str] = []
    for reg in info.registrations:
        try:
            reg.load()
        except microformers.PluginError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)


def check_generation_strategies(plugin_name: str) -> None:
    """Every ``register_generation_strategies`` entry is what ``generate()`` calls: an object with ``__call__``, or a
    class made once without arguments whose instance has one (the kernel's own check, run here rather than at the
    first ``generate()``)."""
    from microformers.generation.mixin import as_strategy

    failures: list[str] = []
    for reg in discovered(plugin_name).registrations:
        if reg.kind != "generation_strategies":
            continue
        try:
            as_strategy(reg.load(), str(reg.name))
        except microformers.MicroformersError as exc:
            failures.append(f"plugin '{plugin_name}': {exc}")
    assert not failures, "\n".join(failures)


def check_plugin(plugin_name: str) -> None:
    """All plugin-conformance checks for one entry point."""
    check_declaration(plugin_name)
    check_entry_module_is_light(plugin_name)
    check_registrations_resolve(plugin_name)
    check_generation_strategies(plugin_name)


class PluginConformanceTests:
    """Subclass in a plugin's tests and set ``plugin_name`` (and ``registers`` to what it must provide)."""

    plugin_name: ClassVar[str] = ""
    #: ``(kind, name)`` pairs the plugin must register, e.g. ``("configs", "llama")``
    registers: ClassVar[tuple[tuple[str, Any], ...]] = ()

    def test_entry_module_imports_no_torch(self) -> None:
        check_entry_module_is_light(self.plugin_name)

    def test_declares_api_version_and_valid_hooks(self) -> None:
        check_declaration(self.plugin_name)

    def test_registrations_resolve(self) -> None:
        check_registrations_resolve(self.plugin_name)

    def test_generation_strategies_are_callable(self) -> None:
        check_generation_strategies(self.plugin_name)

    def test_registers_what_it_promises(self) -> None:
        info = discovered(self.plugin_name)
        have = {(reg.kind, reg.name) for reg in info.registrations}
        missing = [pair for pair in self.registers if pair not in have]
        assert not missing, f"plugin '{self.plugin_name}' does not register {missing}; it does: {sorted(have, key=str)}"

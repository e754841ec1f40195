"""Plugin discovery and the registry every extension lands in.

Discovery runs once, on first need: each entry point in the ``microformers`` group is imported,
its declared API version checked, and its ``register_*`` hooks called with a ``register`` callable
bound to it. A plugin that fails any of this is recorded as broken with its error and contributes
nothing; everything else keeps working. See :mod:`microformers.hookspecs` for the contracts and the
conflict rule.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import pluggy

from . import hookspecs
from ._version import KERNEL_API_VERSION
from .errors import PluginConflictWarning, PluginError, UnknownModelTypeError

ENTRY_POINT_GROUP = "microformers"
IN_PROCESS = "<in-process>"
hookimpl = pluggy.HookimplMarker("microformers")

# hook name -> registry kind
HOOKS: dict[str, str] = {
    "register_models": "models",
    "register_tokenizers": "tokenizers",
    "register_processors": "processors",
    "register_pipelines": "pipelines",
    "register_callbacks": "callbacks",
    "register_quantizers": "quantizers",
    "register_adapters": "adapters",
    "register_exports": "exports",
    "register_generation_strategies": "generation_strategies",
    "register_generation_config_checks": "generation_config_checks",
    "register_checkpoint_formats": "checkpoint_formats",
    "register_gguf_architectures": "gguf_architectures",
    "register_attention_implementations": "attention",
    "register_cli_commands": "cli_commands",
    "register_model_sources": "model_sources",
    "register_environment_reports": "environment_reports",
}

def check_plugin_module(module: Any) -> None:
    """Raise ``PluginError`` unless an entry module declares this kernel's API and implements only known hooks."""
    wanted = getattr(module, "MICROFORMERS_API_VERSION", None)
    if wanted is None:
        raise PluginError(f"it does not declare MICROFORMERS_API_VERSION (this kernel provides {KERNEL_API_VERSION})")
    if int(wanted) != KERNEL_API_VERSION:
        raise PluginError(
            f"it targets kernel API {wanted}, but microformers provides API {KERNEL_API_VERSION}; "
            "install a version of the plugin built for this microformers, or a matching microformers"
        )
    for name, value in vars(module).items():
        marked = hasattr(value, f"{ENTRY_POINT_GROUP}_impl")
        if (marked or name.startswith("register_")) and callable(value) and (name not in HOOKS or not marked):
            close = difflib.get_close_matches(name, HOOKS, n=1)
            problem = "is not marked @microformers.hookimpl" if name in HOOKS else "is not a microformers hook"
            hint = f"; did you mean '{close[0]}'?" if close and name not in HOOKS else "."
            raise PluginError(
                f"{getattr(module, '__name__', module)}.{name} {problem}{hint} Hooks: {', '.join(HOOKS)}."
            )


def resolve_ref(ref: Any) -> Any:
    """Import a ``"module.path:Name"`` reference; anything else is returned as is."""
    if not isinstance(ref, str):
        return ref
    module_name, _, attr = ref.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def ref_name(ref: Any) -> str:
    """The bare class/function name of a reference, without importing it."""
    if isinstance(ref, str):
        return ref.rpartition(":")[2].rpartition(".")[2]
    return getattr(ref, "__name__", repr(ref))


@attrs.define
class Registration:
    """One thing a plugin (or in-process code) registered."""

    kind: str
    name: Any
    ref: Any
    plugin: str
    meta: dict[str, Any] = attrs.field(factory=dict)
    _loaded: Any = attrs.field(default=None, alias="_loaded")

    def load(self) -> Any:
        if self._loaded is None:
            try:
                self._loaded = resolve_ref(self.ref)
            except Exception as exc:
                raise PluginError(
                    f"plugin '{self.plugin}' registered {self.kind} '{self.name}' as {self.ref!r}, "
                    f"but importing it failed: {type(exc).__name__}: {exc}. "
                    "Reinstall the plugin or its dependencies."
                ) from exc
        return self._loaded


@attrs.define
class PluginInfo:
    """What ``microformers plugins`` shows about one entry point."""

    name: str
    module: str
    distribution: str | None
    version: str | None
    error: str | None = None
    registrations: list[Registration] = attrs.field(factory=list)

    @property
    def broken(self) -> bool:
        return self.error is not None


class Registry:
    """All registrations by kind and name, plus the plugins they came from."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._discovered = False
        self._entries: dict[tuple[str, Any], list[Registration]] = {}
        self._preferences: dict[tuple[str, Any], str] = {}
        self._warned: set[tuple[str, Any]] = set()
        self.plugins: dict[str, PluginInfo] = {}
        # (kind, name) -> distribution, from the plugins' MICROFORMERS_PROVIDES declarations
        self.providers: dict[tuple[str, Any], str] = {}
        self._pm = pluggy.PluginManager("microformers")
        self._pm.add_hookspecs(hookspecs)

    # -- discovery -------------------------------------------------------------------------
    def discover(self) -> None:
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
            for ep in sorted(eps, key=lambda e: e.name):
                self._load_entry_point(ep)
            self._read_env_preferences()

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        dist = getattr(ep, "dist", None)
        info = PluginInfo(
            name=ep.name,
            module=ep.value,
            distribution=dist.metadata["Name"] if dist else None,
            version=dist.version if dist else None,
        )
        if ep.name in self.plugins:
            info.error = f"another installed distribution already uses the plugin name '{ep.name}'"
            self.plugins[f"{ep.name} ({info.distribution})"] = info
            return
        self.plugins[ep.name] = info
        try:
            module = ep.load()
            check_plugin_module(module)
            self._pm.register(module, name=ep.name)
            for distribution, kinds in getattr(module, "MICROFORMERS_PROVIDES", {}).items():
                for kind, names in kinds.items():
                    self.providers.update(dict.fromkeys(((kind, n) for n in names), distribution))
            others = [plugin for plugin in self._pm.get_plugins() if plugin is not module]
            for caller in self._pm.get_hookcallers(module) or ():
                # Through pluggy (its call checks apply), one plugin at a time: each registration is
                # attributed to its plugin, and a plugin that fails is dropped without touching the others.
                own = self._pm.subset_hook_caller(caller.name, remove_plugins=others)
                own(register=self._register_fn(HOOKS[caller.name], ep.name))
        except Exception as exc:
            info.error = f"{type(exc).__name__}: {exc}"
            for entry_list in self._entries.values():
                entry_list[:] = [r for r in entry_list if r.plugin != ep.name]
            info.registrations.clear()

    def _register_fn(self, kind: str, plugin: str) -> Callable[..., None]:
        if kind == "models":

            def register_model(model_type: str, config: Any, models: Mapping[str, Any] | None = None) -> None:
                self.add("configs", model_type, config, plugin)
                for auto_name, ref in (models or {}).items():
                    self.add("models", (model_type, auto_name), ref, plugin)
                    self.add("architectures", ref_name(ref), ref, plugin, model_type=model_type)

            return register_model

        def register(name: str, obj: Any, **meta: Any) -> None:
            self.add(kind, name, obj, plugin, **meta)

        return register

    def _read_env_preferences(self) -> None:
        for item in filter(None, os.environ.get("MICROFORMERS_PREFER", "").split(",")):
            key, _, plugin = item.partition("=")
            kind, _, name = key.partition(":")
            if kind and name and plugin:
                self._preferences[(kind.strip(), name.strip())] = plugin.strip()

    # -- registration ----------------------------------------------------------------------
    def add(self, kind: str, name: Any, ref: Any, plugin: str = IN_PROCESS, **meta: Any) -> Registration:
        reg = Registration(kind=kind, name=name, ref=ref, plugin=plugin, meta=meta)
        with self._lock:
            entries = self._entries.setdefault((kind, name), [])
            if plugin == IN_PROCESS:
                entries[:] = [r for r in entries if r.plugin != IN_PROCESS]
            entries.append(reg)
            if plugin in self.plugins:
                self.plugins[plugin].registrations.append(reg)
        return reg

    def prefer(self, kind: str, name: Any, plugin: str) -> None:
        """Choose which plugin's registration wins for ``(kind, name)``."""
        self._preferences[(kind, name)] = plugin

    # -- lookup ----------------------------------------------------------------------------
    def get(self, kind: str, name: Any) -> Registration | None:
        """The winning registration for ``(kind, name)``, or ``None``."""
        self.discover()
        entries = self._entries.get((kind, name))
        if not entries:
            return None
        for reg in entries:
            if reg.plugin == IN_PROCESS:
                return reg
        wanted = self._preferences.get((kind, name))
        if wanted is not None:
            for reg in entries:
                if reg.plugin == wanted:
                    return reg
        winner = min(entries, key=lambda r: r.plugin)
        others = sorted({r.plugin for r in entries} - {winner.plugin})
        if others and (kind, name) not in self._warned and wanted is None:
            self._warned.add((kind, name))
            warnings.warn(
                f"plugins {[winner.plugin, *others]} all register {kind} '{name}'; using '{winner.plugin}' "
                f"(first by plugin name). Choose with microformers.prefer({kind!r}, {name!r}, 'plugin') "
                f"or MICROFORMERS_PREFER='{kind}:{name}=plugin'.",
                PluginConflictWarning,
                stacklevel=3,
            )
        return winner

    def names(self, kind: str) -> list[Any]:
        self.discover()
        return sorted((n for (k, n), regs in self._entries.items() if k == kind and regs), key=str)

    def all(self, kind: str) -> list[Registration]:
        """The winning registration for every name of a kind."""
        return [reg for name in self.names(kind) if (reg := self.get(kind, name)) is not None]

    def require(self, kind: str, name: Any, what: str | None = None) -> Any:
        """Load what ``(kind, name)`` names, or raise an error that says which plugin to install."""
        reg = self.get(kind, name)
        if reg is not None:
            return reg.load()
        raise self.missing_error(kind, name, what)

    def provider_of(self, kind: str, name: Any) -> str | None:
        """The distribution a plugin declares (``MICROFORMERS_PROVIDES``) as providing ``(kind, name)``."""
        self.discover()
        return self.providers.get(("configs" if kind == "models" else kind, name))

    def missing_error(self, kind: str, name: Any, what: str | None = None) -> UnknownModelTypeError | PluginError:
        self.discover()
        what = what or kind.rstrip("s").replace("_", " ")
        installed = [_display_name(n) for n in self.names(kind)]
        lookup_name = name[0] if isinstance(name, tuple) else name
        provider = self.provider_of(kind, lookup_name) if isinstance(lookup_name, str) else None
        lines = [f"No installed plugin provides {what} {_display_name(name)!r}."]
        broken = [p for p in self.plugins.values() if p.broken]
        provider_broken = [p for p in broken if provider and p.distribution and _same_dist(p.distribution, provider)]
        if provider_broken:
            p = provider_broken[0]
            lines.append(f"Plugin '{p.name}' ({p.distribution}) provides it but failed to load: {p.error}")
            lines.append(f"Fix or reinstall it: pip install --force-reinstall {provider}")
            return PluginError(" ".join(lines))
        if provider:
            lines.append(f"Install it with: pip install {provider}")
        if broken:
            lines.append(
                "These plugins failed to load and may be the one you need: "
                + "; ".join(f"'{p.name}' ({p.distribution}): {p.error}" for p in broken)
            )
        lines.append(f"Installed: {', '.join(installed) if installed else 'none'}.")
        error_cls = PluginError if provider or broken else UnknownModelTypeError
        return error_cls(" ".join(lines))


def _display_name(name: Any) -> str:
    """A registry key as users write it: ``'llama'``, or ``'model:Task'`` for tuple keys; any other value as its repr."""
    if isinstance(name, tuple):
        return ":".join(map(str, name))
    return name if isinstance(name, str) else repr(name)


def _same_dist(a: str, b: str) -> bool:
    def norm(s: str) -> str:
        return s.lower().replace("_", "-").replace(".", "-")

    return norm(a) == norm(b)


registry = Registry()


def prefer(kind: str, name: Any, plugin: str) -> None:
    """Choose which plugin wins when several register the same ``(kind, name)``."""
    registry.prefer(kind, name, plugin)


def iter_plugins() -> Iterable[PluginInfo]:
    registry.discover()
    return list(registry.plugins.values())

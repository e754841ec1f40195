"""Discovery through real entry points: fault isolation, API versions, conflicts, in-process registration."""

from __future__ import annotations

import importlib.metadata
import types
import warnings
from typing import Any

import pytest

import microformers
from microformers import PluginConflictWarning, PluginError, UnknownModelTypeError
from microformers import plugins as plugins_module
from microformers._version import KERNEL_API_VERSION
from microformers.plugins import (
    HOOKS,
    IN_PROCESS,
    PluginInfo,
    Registration,
    Registry,
    check_plugin_module,
    hookimpl,
    ref_name,
    resolve_ref,
)


def test_broken_plugins_are_recorded_and_others_work():
    reg = Registry()
    reg.discover()
    assert reg.plugins["broken-import"].broken
    assert "microformers_dependency_that_is_not_installed" in reg.plugins["broken-import"].error
    assert "kernel API 99" in reg.plugins["future-api"].error
    assert not reg.plugins["toy"].broken
    assert reg.get("configs", "toy") is not None
    # the future-api plugin registered nothing
    assert reg.get("model_sources", "from-the-future") is None


def test_missing_name_error_names_broken_plugins_and_their_cause():
    reg = Registry()
    with pytest.raises(PluginError) as info:
        reg.require("model_sources", "from-the-future", what="model alias")
    message = str(info.value)
    assert "from-the-future" in message
    assert "broken-import" in message and "future-api" in message
    assert "kernel API 99" in message


def test_known_provider_is_named_when_missing():
    reg = Registry()
    reg.discover()
    reg.providers[("configs", "unobtainium")] = "microformers-unobtainium"
    with pytest.raises(PluginError, match="pip install microformers-unobtainium"):
        reg.require("configs", "unobtainium", what="model_type")


def test_providers_are_plugin_data():
    """The kernel has no provider table: the hints come from the plugins' MICROFORMERS_PROVIDES (builtin's too)."""
    from microformers import plugins
    from microformers.builtin import plugin as builtin

    assert not hasattr(plugins, "KNOWN_PROVIDERS")
    assert microformers.registry.provider_of("configs", "llama") == "microformers-llama"
    assert microformers.registry.provider_of("models", "gpt2") == "microformers-gpt2"
    assert microformers.registry.provider_of("pipelines", "fill-mask") == "microformers-pipelines"
    declared = {(k, n) for kinds in builtin.MICROFORMERS_PROVIDES.values() for k, ns in kinds.items() for n in ns}
    assert declared <= set(microformers.registry.providers)


def test_unknown_model_type_lists_installed(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-arch"}')
    with pytest.raises((UnknownModelTypeError, PluginError)) as info:
        microformers.AutoConfig.from_pretrained(tmp_path)
    assert "no-such-arch" in str(info.value)
    assert "toy" in str(info.value)


def test_conflict_rule_is_deterministic_with_warning_and_overridable(monkeypatch):
    reg = Registry()
    with pytest.warns(PluginConflictWarning, match="toy-shared-alias"):
        winner = reg.get("model_sources", "toy-shared-alias")
    assert winner.plugin == "toy"  # first by plugin name
    assert winner.load()()[0] == "toy-from-toy-plugin"

    reg.prefer("model_sources", "toy-shared-alias", "zz-conflicting")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reg.get("model_sources", "toy-shared-alias").plugin == "zz-conflicting"

    monkeypatch.setenv("MICROFORMERS_PREFER", "model_sources:toy-shared-alias=zz-conflicting")
    from_env = Registry()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert from_env.get("model_sources", "toy-shared-alias").plugin == "zz-conflicting"


def test_in_process_registration_feeds_the_same_registry_and_wins(tmp_path):
    from microformers_test_toy.modeling_toy import ToyConfig, ToyModel

    class MyConfig(ToyConfig):
        model_type = "my-in-process"

    class MyModel(ToyModel):
        config_class = MyConfig

    microformers.AutoConfig.register("my-in-process", MyConfig)
    microformers.AutoModel.register(MyConfig, MyModel)
    with pytest.raises(microformers.ConfigError, match="exist_ok"):
        microformers.AutoConfig.register("my-in-process", MyConfig)
    model = microformers.AutoModel.from_config(MyConfig(hidden_size=8))
    assert type(model) is MyModel
    model.save_pretrained(tmp_path)
    assert type(microformers.AutoModel.from_pretrained(tmp_path)) is MyModel
    assert microformers.registry.get("models", ("my-in-process", "AutoModel")).plugin == "<in-process>"


def test_lazy_reference_import_error_names_plugin():
    reg = Registry()
    reg.discover()
    reg.add("configs", "ghost", "no_such_module_xyz:Ghost", plugin="toy")
    with pytest.raises(PluginError, match="plugin 'toy'.*no_such_module_xyz"):
        reg.require("configs", "ghost")


def test_plugin_exports_resolve_lazily_and_missing_names_say_what_to_install():
    import microformers
    from microformers import registry

    registry.add("exports", "ExportedByTest", "microformers.errors:InputError")
    try:
        from microformers import ExportedByTest

        assert ExportedByTest is microformers.InputError
    finally:
        registry._entries.pop(("exports", "ExportedByTest"), None)
        microformers.__dict__.pop("ExportedByTest", None)
    assert not hasattr(microformers, "NoSuchNameAnywhere")
    if registry.get("exports", "Trainer") is None:
        with pytest.raises(microformers.PluginError, match="pip install microformers-trainer"):
            microformers.Trainer  # noqa: B018


# From test_plugins_mutants.py: Behaviour of ``microformers.plugins`` that the mutation pass found unasserted
# (docs/reliability.md). Discovery runs on private ``Registry`` objects fed with stand-in entry points, so the
# checks on entry modules, the recording of broken plugins, preferences and the conflict rule are tested one by one
# without touching the process-wide registry.


class Dist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


class EntryPoint:
    def __init__(self, name: str, module: Any, dist: Dist | None = None) -> None:
        self.name = name
        self.value = f"{name}_module"
        self.dist = dist
        self._module = module

    def load(self) -> Any:
        if isinstance(self._module, Exception):
            raise self._module
        return self._module


class BareEntryPoint:
    """An entry point object without a ``dist`` attribute (older importlib.metadata backports)."""

    name = "bare"
    value = "bare_module"

    def load(self) -> Any:
        return plugin_module("bare")


def plugin_module(name: str, version: Any = KERNEL_API_VERSION, **hooks: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    if version is not None:
        module.MICROFORMERS_API_VERSION = version
    for hook_name, function in hooks.items():
        setattr(module, hook_name, function)
    return module


def discovered(monkeypatch: pytest.MonkeyPatch, *eps: EntryPoint) -> Registry:
    seen: list[str] = []

    def entry_points(group: str) -> list[EntryPoint]:
        seen.append(group)
        return list(eps)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    registry = Registry()
    registry.discover()
    registry.discover()  # once only
    assert seen == ["microformers"]
    return registry


# -- entry modules ----------------------------------------------------------------------------------------
def test_entry_module_must_declare_this_api() -> None:
    with pytest.raises(PluginError) as info:
        check_plugin_module(plugin_module("m", version=None))
    assert (
        str(info.value) == f"it does not declare MICROFORMERS_API_VERSION (this kernel provides {KERNEL_API_VERSION})"
    )
    with pytest.raises(PluginError) as info:
        check_plugin_module(plugin_module("m", version=KERNEL_API_VERSION + 1))
    assert str(info.value) == (
        f"it targets kernel API {KERNEL_API_VERSION + 1}, but microformers provides API {KERNEL_API_VERSION}; "
        "install a version of the plugin built for this microformers, or a matching microformers"
    )
    check_plugin_module(plugin_module("m", version=str(KERNEL_API_VERSION)))


def test_entry_module_hooks_must_be_known_and_marked() -> None:
    hooks = ", ".join(HOOKS)

    def register_modles(register: Any) -> None: ...

    with pytest.raises(PluginError) as info:
        check_plugin_module(plugin_module("pkg.plugin", register_modles=register_modles))
    assert str(info.value) == (
        f"pkg.plugin.register_modles is not a microformers hook; did you mean 'register_models'? Hooks: {hooks}."
    )

    def register_models(register: Any) -> None: ...

    with pytest.raises(PluginError) as info:
        check_plugin_module(plugin_module("pkg.plugin", register_models=register_models))
    assert str(info.value) == f"pkg.plugin.register_models is not marked @microformers.hookimpl. Hooks: {hooks}."

    @hookimpl
    def completely_different(register: Any) -> None: ...

    with pytest.raises(PluginError) as info:
        check_plugin_module(plugin_module("pkg.plugin", completely_different=completely_different))
    assert str(info.value) == f"pkg.plugin.completely_different is not a microformers hook. Hooks: {hooks}."
    # a non-callable register_* value and a marked known hook are fine
    check_plugin_module(plugin_module("ok", register_models=hookimpl(register_models), register_note="text"))


def test_an_entry_object_without_a_name_is_named_by_itself() -> None:
    # an entry point may load an object (``pkg:obj``), not a module: the message shows the object
    entry = types.SimpleNamespace(MICROFORMERS_API_VERSION=KERNEL_API_VERSION)
    entry.register_modles = lambda register: None
    with pytest.raises(PluginError) as info:
        check_plugin_module(entry)
    assert str(info.value).startswith(f"{entry}.register_modles is not a microformers hook; did you mean")


def test_references_import_lazily_and_name_without_importing() -> None:
    assert resolve_ref("os.path:join") is __import__("os").path.join
    assert resolve_ref("collections:OrderedDict.fromkeys") == __import__("collections").OrderedDict.fromkeys
    assert resolve_ref("json") is __import__("json")
    marker = object()
    assert resolve_ref(marker) is marker
    assert ref_name("pkg.mod:Outer.Inner") == "Inner"
    assert ref_name("pkg.mod:Name") == "Name"
    assert ref_name(dict) == "dict"
    assert ref_name(5) == "5"


def test_registration_loads_once_and_names_the_plugin_when_import_fails() -> None:
    reg = Registration(kind="models", name="x", ref="json:dumps", plugin="p")
    assert reg.load() is __import__("json").dumps and reg._loaded is reg.load()
    assert reg.meta == {}
    broken = Registration(kind="tokenizers", name="t", ref="no_such_module_xyz:T", plugin="p")
    with pytest.raises(PluginError) as info:
        broken.load()
    assert str(info.value) == (
        "plugin 'p' registered tokenizers 't' as 'no_such_module_xyz:T', but importing it failed: "
        "ModuleNotFoundError: No module named 'no_such_module_xyz'. Reinstall the plugin or its dependencies."
    )
    assert PluginInfo("n", "m", None, None).broken is False
    assert PluginInfo("n", "m", None, None, error="boom").broken is True


# -- discovery ------------------------------------------------------------------------------------------
def test_discovery_registers_hooks_records_providers_and_broken_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    @hookimpl
    def register_models(register: Any) -> None:
        register("toyx", "pkg:ToyXConfig", {"AutoModel": "pkg:ToyXModel", "AutoModelForCausalLM": "pkg:ToyXLM"})

    @hookimpl
    def register_tokenizers(register: Any) -> None:
        register("ToyXTokenizer", "pkg:ToyXTokenizer", fast=True)

    good = plugin_module("good", register_models=register_models, register_tokenizers=register_tokenizers)
    good.MICROFORMERS_PROVIDES = {"microformers-extra": {"configs": ["extra1", "extra2"], "pipelines": ["p"]}}

    @hookimpl
    def register_pipelines(register: Any) -> None:
        register("half", "pkg:Half")
        raise RuntimeError("hook failed")

    half = plugin_module("half", register_pipelines=register_pipelines)
    registry = discovered(
        monkeypatch,
        EntryPoint("zz_good", good, Dist("microformers-good", "1.2")),
        EntryPoint("aa_half", half, Dist("microformers-half", "0.1")),
        EntryPoint("old", plugin_module("old", version=0)),
        EntryPoint("crash", ImportError("no torch")),
        EntryPoint("zz_good", good, Dist("microformers-other", "2.0")),
        BareEntryPoint(),
        EntryPoint("zzz_late", ImportError("late")),  # a failure after others registered removes only its own
    )
    bare = registry.plugins["bare"]
    assert bare.distribution is None and bare.version is None and bare.error is None
    info = registry.plugins["zz_good"]
    assert (info.name, info.module, info.distribution, info.version, info.error) == (
        "zz_good",
        "zz_good_module",
        "microformers-good",
        "1.2",
        None,
    )
    assert registry.get("configs", "toyx").ref == "pkg:ToyXConfig"
    assert registry.get("models", ("toyx", "AutoModelForCausalLM")).ref == "pkg:ToyXLM"
    arch = registry.get("architectures", "ToyXLM")
    assert arch.ref == "pkg:ToyXLM" and arch.meta == {"model_type": "toyx"} and arch.plugin == "zz_good"
    assert registry.get("tokenizers", "ToyXTokenizer").meta == {"fast": True}
    assert [r.kind for r in info.registrations] == [
        "configs",
        "models",
        "architectures",
        "models",
        "architectures",
        "tokenizers",
    ]
    assert registry.providers == {
        ("configs", "extra1"): "microformers-extra",
        ("configs", "extra2"): "microformers-extra",
        ("pipelines", "p"): "microformers-extra",
    }
    # a hook that raised halfway leaves nothing behind
    assert registry.plugins["aa_half"].error == "RuntimeError: hook failed"
    assert registry.get("pipelines", "half") is None and registry.plugins["aa_half"].registrations == []
    assert registry.plugins["old"].error.startswith("PluginError: it targets kernel API 0")
    assert registry.plugins["old"].distribution is None and registry.plugins["old"].version is None
    assert registry.plugins["crash"].error == "ImportError: no torch"
    duplicate = registry.plugins["zz_good (microformers-other)"]
    assert duplicate.error == "another installed distribution already uses the plugin name 'zz_good'"
    assert list(registry.plugins) == [
        "aa_half",
        "bare",
        "crash",
        "old",
        "zz_good",
        "zz_good (microformers-other)",
        "zzz_late",
    ]


def test_environment_preferences(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MICROFORMERS_PREFER", " tokenizers : fast = p2 ,,bad,models:=p,configs:x=,pipelines:a:b=p3")
    registry = discovered(monkeypatch)
    assert registry._preferences == {("tokenizers", "fast"): "p2", ("pipelines", "a:b"): "p3"}


# -- lookup ---------------------------------------------------------------------------------------------
def fresh() -> Registry:
    registry = Registry()
    registry._discovered = True
    return registry


def test_the_conflict_warning_points_at_the_code_that_asked() -> None:
    registry = fresh()
    registry.add("configs", "t", "json:JSONDecoder", "plugin_b")
    registry.add("configs", "t", "json:JSONEncoder", "plugin_a")
    with pytest.warns(PluginConflictWarning) as record:
        registry.require("configs", "t")  # get() warns on behalf of require()'s caller (stacklevel=3)
    # not the registry's own line (under mutmut extra trampoline frames sit between, so no equality with __file__)
    assert record[0].filename != plugins_module.__file__


def test_conflicts_preferences_and_in_process_registrations() -> None:
    registry = fresh()
    registry.add("pipelines", "t", "ref-b", "plugin_b")
    registry.add("pipelines", "t", "ref-a", "plugin_a")
    registry.add("pipelines", "t", "ref-c", "plugin_c")
    with pytest.warns(PluginConflictWarning) as record:
        assert registry.get("pipelines", "t").ref == "ref-a"
    assert str(record[0].message) == (
        "plugins ['plugin_a', 'plugin_b', 'plugin_c'] all register pipelines 't'; using 'plugin_a' "
        "(first by plugin name). Choose with microformers.prefer('pipelines', 't', 'plugin') "
        "or MICROFORMERS_PREFER='pipelines:t=plugin'."
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert registry.get("pipelines", "t").ref == "ref-a"  # warned once only
        registry.prefer("pipelines", "t", "plugin_c")
        assert registry.get("pipelines", "t").ref == "ref-c"
        registry.prefer("pipelines", "t", "not_installed")  # a preference for nothing: the rule, quietly
        registry._warned.clear()
        assert registry.get("pipelines", "t").ref == "ref-a"
        registry.add("pipelines", "t", "mine")
        registry.add("pipelines", "t", "mine again")  # in-process replaces in-process
        assert registry.get("pipelines", "t").ref == "mine again"
        assert [r.plugin for r in registry._entries[("pipelines", "t")]].count(IN_PROCESS) == 1
        registry.add("pipelines", "solo", "s", "plugin_b")
        assert registry.get("pipelines", "solo").ref == "s"  # one plugin: no warning
    assert registry.get("pipelines", "none") is None


def test_prefer_function_sets_the_process_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = fresh()
    monkeypatch.setattr(plugins_module, "registry", registry)
    plugins_module.prefer("models", ("a", "b"), "p")
    assert registry._preferences == {("models", ("a", "b")): "p"}


def test_a_kind_mixing_plain_names_and_pairs_is_listed_by_text() -> None:
    registry = fresh()
    registry.add("configs", "b", "json:JSONDecoder", "p")
    registry.add("configs", ("c", "variant"), "json:JSONDecodeError", "p")
    registry.add("configs", "a", "json:JSONEncoder", "p")
    assert registry.names("configs") == [("c", "variant"), "a", "b"]  # "('c', ..." sorts before "a"


def test_names_all_require_and_providers() -> None:
    registry = fresh()
    registry.add("models", ("b", "AutoModel"), "json:dumps", "p")
    registry.add("models", ("a", "AutoModel"), "json:loads", "p")
    registry.add("configs", "b", "json:JSONDecoder", "p")
    registry.add("configs", "a", "json:JSONEncoder", "p")
    registry._entries[("configs", "empty")] = []
    assert registry.names("models") == [("a", "AutoModel"), ("b", "AutoModel")]
    assert registry.names("configs") == ["a", "b"]
    assert [r.name for r in registry.all("configs")] == ["a", "b"]
    assert registry.require("configs", "a") is __import__("json").JSONEncoder
    registry.providers[("configs", "c")] = "microformers-c"
    assert registry.provider_of("models", "c") == "microformers-c"  # models are looked up by their config
    assert registry.provider_of("configs", "c") == "microformers-c"
    assert registry.provider_of("pipelines", "c") is None
    with pytest.raises(PluginError) as info:
        registry.require("models", ("c", "AutoModel"))
    assert str(info.value) == (
        "No installed plugin provides model 'c:AutoModel'. Install it with: pip install microformers-c "
        "Installed: a:AutoModel, b:AutoModel."
    )
    with pytest.raises(UnknownModelTypeError) as info:
        registry.require("cli_commands", "serve", what="command")
    assert str(info.value) == "No installed plugin provides command 'serve'. Installed: none."


def test_a_broken_provider_is_named_with_the_reinstall_command() -> None:
    registry = fresh()
    registry.providers[("configs", "c")] = "microformers_c"
    registry.plugins["c"] = PluginInfo("c", "m", "microformers-c", "1", error="ImportError: x")
    registry.plugins["d"] = PluginInfo("d", "m", None, None, error="ImportError: y")
    error = registry.missing_error("configs", "c")
    assert type(error) is PluginError
    assert str(error) == (
        "No installed plugin provides config 'c'. Plugin 'c' (microformers-c) provides it but failed to load: "
        "ImportError: x Fix or reinstall it: pip install --force-reinstall microformers_c"
    )
    other = registry.missing_error("configs", "z")
    assert str(other) == (
        "No installed plugin provides config 'z'. These plugins failed to load and may be the one you need: "
        "'c' (microformers-c): ImportError: x; 'd' (None): ImportError: y Installed: none."
    )


def test_iter_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = fresh()
    monkeypatch.setattr(plugins_module, "registry", registry)
    registry.plugins["p"] = PluginInfo("p", "m", None, None)
    listed = plugins_module.iter_plugins()
    assert isinstance(listed, list) and [p.name for p in listed] == ["p"]


def test_registration_into_a_known_plugin_is_listed_under_it() -> None:
    registry = fresh()
    registry.plugins["p"] = PluginInfo("p", "m", None, None)
    reg = registry.add("exports", "Thing", "json:dumps", "p", lazy=True)
    assert registry.plugins["p"].registrations == [reg] and reg.meta == {"lazy": True}
    registry.add("exports", "Other", "json:dumps")
    assert registry.plugins["p"].registrations == [reg]


# From test_mutation_kills.py: Tests written for mutants that survived the mutation run (docs/reliability.md,
# "Mutation testing"). Each test names the change it catches; together with the rest of the suite they make the
# kernel's behaviour, not just its happy path, pinned down.


def test_missing_error_messages_are_exact(monkeypatch) -> None:
    """Caught mutants in ``Registry.missing_error``: how ``what`` is derived from the kind, how tuple names and
    the installed list are written, which plugins are listed as broken, and which error class is raised."""
    from microformers import PluginError, UnknownModelTypeError, registry

    registry.discover()
    broken = [p for p in registry.plugins.values() if p.broken]
    installed = ", ".join(registry.names("configs"))
    error = registry.missing_error("configs", "nope")
    failed = "; ".join(f"'{p.name}' ({p.distribution}): {p.error}" for p in broken)
    if broken:  # the test-only broken plugins are installed: they are offered as the possible provider
        assert isinstance(error, PluginError)
        assert str(error) == (
            f"No installed plugin provides config 'nope'. These plugins failed to load and may be the one you "
            f"need: {failed} Installed: {installed}."
        )
    monkeypatch.setattr(registry, "plugins", {k: p for k, p in registry.plugins.items() if not p.broken})
    error = registry.missing_error("configs", "nope")
    assert type(error) is UnknownModelTypeError
    assert str(error) == f"No installed plugin provides config 'nope'. Installed: {installed}."
    formats = registry.missing_error("checkpoint_formats", "nope")
    assert str(formats).startswith("No installed plugin provides checkpoint format 'nope'. Installed: ")
    heads = registry.missing_error("models", ("llama", "AutoModelForNothing"))
    listed = ", ".join(":".join(n) for n in registry.names("models"))
    assert str(heads).startswith("No installed plugin provides model 'llama:AutoModelForNothing'.")
    assert str(heads).endswith(f" Installed: {listed}.") and "bert:AutoModel" in listed


def test_distribution_names_compare_normalised() -> None:
    """Caught mutants in ``_same_dist``: '_' and '.' are the same as '-' in distribution names, case is ignored.
    (``lower()`` -> ``upper()`` is an equivalent mutant: both sides change alike.)"""
    from microformers.plugins import _same_dist

    assert _same_dist("microformers_llama", "microformers-llama")
    assert _same_dist("Microformers.Llama", "microformers-llama")
    assert _same_dist("microformers-llama", "MICROFORMERS_LLAMA")
    assert not _same_dist("microformers-llama", "microformers-llam")
    assert not _same_dist("microformers_llama", "microformersxllama")


def test_model_classes_of_installed_plugins_are_top_level_names() -> None:
    """``from microformers import BertModel`` as from the reference: every registered architecture class."""
    names = [n for n in microformers.registry.names("architectures") if isinstance(n, str)]
    assert names
    for name in names[:5]:
        assert getattr(microformers, name).__name__ == name
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchModelForAnything'"):
        microformers.NoSuchModelForAnything  # noqa: B018

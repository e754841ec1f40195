"""Discovery through real entry points: fault isolation, API versions, conflicts, in-process registration."""

from __future__ import annotations

import warnings

import pytest

import microformers
from microformers import PluginConflictWarning, PluginError, UnknownModelTypeError
from microformers.plugins import Registry


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

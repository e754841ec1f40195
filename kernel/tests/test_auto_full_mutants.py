"""Behaviour of ``microformers.auto`` that the full mutation run (workspace hauto) found unasserted.

See docs/reliability.md, "Mutation testing". Each test pins down what a user or plugin author relies on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from microformers import (
    AutoConfig,
    AutoFeatureExtractor,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoProcessor,
    AutoTokenizer,
    ConfigError,
    MicroformersError,
    PretrainedConfig,
    UnknownModelTypeError,
)
from microformers import auto as auto_module
from microformers.plugins import Registry


class _Loaded:
    @classmethod
    def from_pretrained(cls, pretrained: object, *inputs: object, **kwargs: object) -> tuple:
        return cls.__name__, Path(str(pretrained)), inputs, kwargs

    @classmethod
    def from_files(cls, files: dict, *inputs: object, **kwargs: object) -> tuple:
        return cls.__name__, files, inputs, kwargs


class LowTokenizer(_Loaded):
    pass


class HighTokenizer(_Loaded):
    pass


class MyFeatures(_Loaded):
    pass


class MyProcessor(_Loaded):
    pass


def _write(folder: Path, **files: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    return folder


@pytest.fixture
def fresh(isolated_registry: Callable[..., Registry]) -> Registry:
    return isolated_registry(auto_module)


def test_auto_classes_refuse_direct_construction_and_say_what_to_call() -> None:
    expected = "use AutoModelForCausalLM.from_pretrained(...) or .from_config(...)"
    with pytest.raises(MicroformersError, match=f"^{re.escape(expected)}$"):
        AutoModelForCausalLM()
    with pytest.raises(MicroformersError, match=f"^{re.escape('use AutoTokenizer.from_pretrained(...)')}$"):
        AutoTokenizer()


def test_registered_tokenizers_are_chosen_by_class_name_by_name_and_by_priority(
    tmp_path: Path, fresh: Registry
) -> None:
    AutoTokenizer.register("low", LowTokenizer, tokenizer_classes=("LowTok",))
    AutoTokenizer.register("zhigh", HighTokenizer, tokenizer_classes=("HighTok",), priority=1)  # default is 0
    by_class = _write(tmp_path / "a", tokenizer_config={"tokenizer_class": "LowTok"})
    assert AutoTokenizer.from_pretrained(by_class)[0] == "LowTokenizer"  # not the higher-priority backend
    by_name = _write(tmp_path / "b", tokenizer_config={"tokenizer_class": "low"})
    assert AutoTokenizer.from_pretrained(by_name)[0] == "LowTokenizer"
    unnamed = _write(tmp_path / "c", tokenizer_config={})
    assert AutoTokenizer.from_pretrained(unnamed, "extra", padding_side="left") == (
        "HighTokenizer",
        unnamed,
        ("extra",),
        {"padding_side": "left"},
    )


def test_registered_feature_extractor_and_processor_are_found_by_model_type_and_role(
    tmp_path: Path, fresh: Registry
) -> None:
    AutoFeatureExtractor.register("MyFeatures", MyFeatures, model_types=("reg_toy",))
    AutoProcessor.register("MyProcessor", MyProcessor, model_types=("reg_toy",))
    folder = _write(tmp_path / "a", config={"model_type": "reg_toy"}, tokenizer_config={"model_max_length": 4})
    assert AutoFeatureExtractor.from_pretrained(folder)[0] == "MyFeatures"  # the feature extractor, not the processor
    assert AutoProcessor.from_pretrained(folder)[0] == "MyProcessor"
    by_name = _write(tmp_path / "b", preprocessor_config={"feature_extractor_type": "MyFeatures"})
    assert AutoFeatureExtractor.from_pretrained(by_name)[0] == "MyFeatures"
    by_class = _write(tmp_path / "c", processor_config={"processor_class": "MyProcessor"})
    assert AutoProcessor.from_pretrained(by_class)[0] == "MyProcessor"


def test_auto_config_for_an_unknown_model_type_names_the_model_type(fresh: Registry) -> None:
    with pytest.raises(UnknownModelTypeError, match=r"^No installed plugin provides model_type 'no_such_type'\. "):
        AutoConfig.for_model("no_such_type")


@pytest.fixture
def processors(fresh: Registry) -> Registry:
    AutoFeatureExtractor.register("MyFeatures", MyFeatures, model_types=("feat_toy",))
    AutoProcessor.register("MyProcessor", MyProcessor, model_types=("proc_toy",))
    AutoTokenizer.register("low", LowTokenizer)
    return fresh


def test_auto_processor_takes_processor_class_or_image_processor_type_from_the_processor_files(
    tmp_path: Path, processors: Registry
) -> None:
    named = _write(tmp_path / "a", processor_config={"processor_class": "MyProcessor"})
    assert AutoProcessor.from_pretrained(named, size=3) == ("MyProcessor", named, (), {"size": 3})
    image = _write(tmp_path / "b", preprocessor_config={"image_processor_type": "MyProcessor"})
    assert AutoProcessor.from_pretrained(image, size=3) == ("MyProcessor", image, (), {"size": 3})
    in_tokenizer_config = _write(tmp_path / "c", tokenizer_config={"processor_class": "MyProcessor"})
    assert AutoProcessor.from_pretrained(in_tokenizer_config, size=3) == (
        "MyProcessor",
        in_tokenizer_config,
        (),
        {"size": 3},
    )
    unknown = _write(tmp_path / "d", processor_config={"processor_class": "NoSuchProcessor"})
    with pytest.raises(
        UnknownModelTypeError,
        match=r"^No installed plugin provides processor 'NoSuchProcessor'\. Installed: MyFeatures, MyProcessor\.$",
    ):
        AutoProcessor.from_pretrained(unknown)


def test_auto_processor_falls_back_to_the_tokenizer_or_the_feature_extractor(
    tmp_path: Path, processors: Registry
) -> None:
    only_tokenizer = _write(tmp_path / "a", tokenizer_config={"model_max_length": 4})
    assert AutoProcessor.from_pretrained(only_tokenizer, padding_side="left") == (
        "LowTokenizer",
        only_tokenizer,
        (),
        {"padding_side": "left"},
    )
    # an image_processor_type in tokenizer_config.json does not choose a processor
    image_in_tokenizer = _write(tmp_path / "b", tokenizer_config={"image_processor_type": "NoSuchProcessor"})
    assert AutoProcessor.from_pretrained(image_in_tokenizer)[0] == "LowTokenizer"
    empty = tmp_path / "c"
    empty.mkdir()
    assert AutoProcessor.from_pretrained(empty)[0] == "LowTokenizer"
    both = _write(
        tmp_path / "d",
        tokenizer_config={"model_max_length": 4},
        preprocessor_config={"feature_extractor_type": "MyFeatures"},
    )
    assert AutoProcessor.from_pretrained(both)[0] == "LowTokenizer"  # a tokenizer config wins over features
    nested = _write(tmp_path / "e", processor_config={"feature_extractor": {"feature_extractor_type": "MyFeatures"}})
    assert AutoProcessor.from_pretrained(nested, sampling_rate=8) == ("MyFeatures", nested, (), {"sampling_rate": 8})
    # the model type's processor needs a tokenizer config; without one the feature extractor is used
    no_tokenizer = _write(
        tmp_path / "f", config={"model_type": "proc_toy"}, preprocessor_config={"feature_extractor_type": "MyFeatures"}
    )
    assert AutoProcessor.from_pretrained(no_tokenizer)[0] == "MyFeatures"


def test_auto_processor_reads_the_processor_files_of_the_subfolder(tmp_path: Path, processors: Registry) -> None:
    _write(tmp_path / "repo", tokenizer_config={"model_max_length": 4})
    _write(tmp_path / "repo" / "sub", processor_config={"processor_class": "MyProcessor"})
    result = AutoProcessor.from_pretrained(tmp_path / "repo", subfolder="sub")
    assert result[0] == "MyProcessor" and result[3] == {"subfolder": "sub"}


def test_processors_registered_without_model_types_do_not_match_a_model_type(tmp_path: Path, fresh: Registry) -> None:
    fresh.add("processors", "Plain", MyProcessor, role="processor")  # a plugin's registration may omit model_types
    AutoTokenizer.register("low", LowTokenizer)
    folder = _write(tmp_path / "a", config={"model_type": "proc_toy"}, tokenizer_config={"model_max_length": 4})
    assert AutoProcessor.from_pretrained(folder)[0] == "LowTokenizer"


def test_auto_class_makes_one_dispatching_class_per_new_head_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auto_module, "_AUTO_CLASSES", {})
    head = auto_module.auto_class("AutoModelForMutationHead")
    assert auto_module.auto_class("AutoModelForMutationHead") is head
    assert head.__name__ == "AutoModelForMutationHead" and head.auto_name == "AutoModelForMutationHead"
    assert head.__doc__ == "Dispatches to the registered AutoModelForMutationHead head."
    with pytest.raises(MicroformersError, match=r"^use AutoModelForMutationHead\.from_pretrained\(\.\.\.\)"):
        head()


def test_auto_config_register_checks_the_class_model_type_and_makes_it_loadable(
    tmp_path: Path, fresh: Registry
) -> None:
    class OtherConfig(PretrainedConfig):
        model_type = "other_toy"

    expected = "AutoConfig.register('reg_toy', OtherConfig): the class says model_type 'other_toy'; they must match"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        AutoConfig.register("reg_toy", OtherConfig)
    AutoConfig.register("other_toy", OtherConfig)
    assert type(AutoConfig.for_model("other_toy")) is OtherConfig
    folder = _write(tmp_path / "a", config={"model_type": "other_toy"})
    assert type(AutoConfig.from_pretrained(folder)) is OtherConfig


def test_auto_feature_extractor_errors_name_the_missing_extractor_and_what_to_do(
    tmp_path: Path, processors: Registry
) -> None:
    unknown = _write(tmp_path / "a", preprocessor_config={"feature_extractor_type": "NoSuchFeatures"})
    with pytest.raises(
        UnknownModelTypeError, match=r"^No installed plugin provides feature extractor 'NoSuchFeatures'\. "
    ):
        AutoFeatureExtractor.from_pretrained(unknown)
    none = _write(tmp_path / "b", config={"model_type": "unknown_toy"})
    expected = (
        f"{none}: no feature extractor found (no 'feature_extractor_type' in preprocessor_config.json and no "
        "installed plugin declares one for its model_type); save one with feature_extractor.save_pretrained"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        AutoFeatureExtractor.from_pretrained(none)


class HeadConfig(PretrainedConfig):
    model_type = "head_toy"


class _Built:
    @classmethod
    def from_config(cls, config: PretrainedConfig, **kwargs: object) -> tuple:
        return cls.__name__, config, kwargs


class LocalHead(_Built):
    pass


class RemoteHead(_Built):
    pass


@pytest.fixture
def remote_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Records what the auto class asks ``load_remote_class`` for (which code, from where, with what consent)."""
    import microformers.remote

    calls: list[tuple] = []

    def load_remote_class(*args: object) -> type:
        calls.append(args)
        return RemoteHead

    monkeypatch.setattr(microformers.remote, "load_remote_class", load_remote_class)
    return calls


def _remote_config() -> HeadConfig:
    config = HeadConfig()
    config.auto_map = {"AutoModelForCausalLM": "modeling_head.HeadModel", "AutoConfig": "x.Y"}
    config.name_or_path = "folder/of/head"
    return config


def test_from_config_uses_auto_map_code_when_trusted_or_unknown_else_the_registry(
    fresh: Registry, remote_calls: list[tuple]
) -> None:
    config = _remote_config()
    assert AutoModelForCausalLM.from_config(config, trust_remote_code=True, extra=1) == (
        "RemoteHead",
        config,
        {"extra": 1},
    )  # no plugin knows head_toy yet: the auto_map code, with consent passed on
    assert remote_calls == [
        ("modeling_head.HeadModel", "folder/of/head", True, {}, {}, "AutoModelForCausalLM", config.auto_map)
    ]
    AutoModelForCausalLM.register(HeadConfig, LocalHead)
    assert AutoModelForCausalLM.from_config(config, extra=2) == ("LocalHead", config, {"extra": 2})
    assert AutoModelForCausalLM.from_config(config, trust_remote_code=True)[0] == "RemoteHead"  # trusted: remote wins
    assert len(remote_calls) == 2


def test_missing_heads_and_model_types_are_named(fresh: Registry) -> None:
    AutoModelForCausalLM.register(HeadConfig, LocalHead)
    with pytest.raises(
        ConfigError,
        match=r"^model_type 'head_toy' has no AutoModelForMaskedLM head in plugin '<in-process>'; available: "
        r"AutoModelForCausalLM$",
    ):
        AutoModelForMaskedLM.from_config(HeadConfig())
    auto_module.auto_class("AutoModelForSequenceClassification").register(HeadConfig, RemoteHead)
    with pytest.raises(ConfigError, match=r"available: AutoModelForCausalLM, AutoModelForSequenceClassification$"):
        AutoModelForMaskedLM.from_config(HeadConfig())

    class BareConfig(PretrainedConfig):
        model_type = "bare_toy"

    AutoConfig.register("bare_toy", BareConfig)
    with pytest.raises(ConfigError, match=r"head in plugin '<in-process>'; available: none$"):
        AutoModelForMaskedLM.from_config(BareConfig())

    class UnknownConfig(PretrainedConfig):
        model_type = "unknown_toy"

    expected = "No installed plugin provides model_type 'unknown_toy'. Installed: bare_toy, head_toy."
    with pytest.raises(UnknownModelTypeError, match=f"^{re.escape(expected)}$"):
        AutoModelForCausalLM.from_config(UnknownConfig())


def test_auto_model_register_refuses_a_second_in_process_head_unless_exist_ok(fresh: Registry) -> None:
    class PluginConfig(PretrainedConfig):
        model_type = "head_toy"

    fresh.add("configs", "head_toy", PluginConfig, plugin="some-plugin")
    fresh.add("models", ("head_toy", "AutoModelForCausalLM"), RemoteHead, plugin="some-plugin")
    AutoModelForCausalLM.register(HeadConfig, LocalHead)  # overriding a plugin's head is allowed
    assert fresh.require("models", ("head_toy", "AutoModelForCausalLM")) is LocalHead
    assert fresh.require("configs", "head_toy") is PluginConfig  # an existing config is kept
    expected = "AutoModelForCausalLM for 'head_toy' is already registered; pass exist_ok=True"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        AutoModelForCausalLM.register(HeadConfig, RemoteHead)
    AutoModelForCausalLM.register(HeadConfig, RemoteHead, exist_ok=True)
    assert fresh.require("models", ("head_toy", "AutoModelForCausalLM")) is RemoteHead


def test_adapter_name_and_kwargs_go_to_load_adapter_not_to_the_model(
    saved_toy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from microformers.modeling import PreTrainedModel

    loaded: list[tuple] = []
    monkeypatch.setattr(PreTrainedModel, "load_adapter", lambda self, *a, **kw: loaded.append((a, kw)))
    (saved_toy / "adapter_config.json").write_text("{}")
    AutoModelForCausalLM.from_pretrained(saved_toy, adapter_name="mine", adapter_kwargs={"is_trainable": True})
    assert loaded == [((saved_toy,), {"adapter_name": "mine", "is_trainable": True})]

"""``microformers.auto``: which class an Auto class picks (config ``model_type``, ``auto_map``, registrations,
plugins) and what it hands on; errors that name what is missing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

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
from microformers.weights import Checkpoint

# From test_auto_full_mutants.py: Behaviour of ``microformers.auto`` that the full mutation run (workspace hauto)
# found unasserted. See docs/reliability.md, "Mutation testing". Each test pins down what a user or plugin author
# relies on.


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


class RemoteConfig(PretrainedConfig):
    model_type = "head_toy"


class _StandIn:
    """A model class stand-in: building it returns its name and what it was given."""

    @classmethod
    def from_config(cls, config: PretrainedConfig, **kwargs: object) -> tuple:
        return cls.__name__, config, kwargs

    @classmethod
    def from_pretrained(cls, checkpoint: object, *args: object, config: PretrainedConfig, **kwargs: object) -> tuple:
        return cls.__name__, args, config, kwargs


class LocalHead(_StandIn):
    pass


class RemoteHead(_StandIn):
    pass


@pytest.fixture
def remote_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Records what the auto classes ask ``load_remote_class`` for (which code, from where, with what consent).

    The remote config and model code are stand-ins: ``RemoteConfig`` and ``RemoteHead``.
    """
    import microformers.remote

    calls: list[tuple] = []

    def load_remote_class(*args: object) -> type:
        calls.append(args)
        return RemoteConfig if args[5] == "AutoConfig" else RemoteHead

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


# -- second round (workspace iauto): AutoTokenizer.from_pretrained, _backend_for, _AutoModel.from_pretrained,
# _adapter_folder ------------------------------------------------------------------------------------------


class NamedTokenizer:
    """A backend whose tokenizer records the name it was loaded under."""

    def __init__(self, name_or_path: str) -> None:
        self.name_or_path = name_or_path

    @classmethod
    def from_pretrained(cls, folder: Path, *inputs: object, **kwargs: object) -> NamedTokenizer:
        return cls(str(folder))


def test_auto_tokenizer_keeps_its_own_arguments_and_names_the_tokenizer_after_what_was_asked(
    tmp_path: Path, fresh: Registry
) -> None:
    AutoTokenizer.register("low", LowTokenizer)
    folder = _write(tmp_path / "a", tokenizer_config={})
    assert AutoTokenizer.from_pretrained(folder, trust_remote_code=True) == ("LowTokenizer", folder, (), {})
    AutoTokenizer.register("named", NamedTokenizer, priority=1)
    _write(tmp_path / "repo" / "sub", tokenizer_config={})
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "repo", subfolder="sub")
    assert tokenizer.name_or_path == str(tmp_path / "repo")  # the name asked for, not the subfolder read


def test_a_malformed_tokenizer_config_is_named_as_such(tmp_path: Path, fresh: Registry) -> None:
    AutoTokenizer.register("low", LowTokenizer)
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"tokenizer_config\.json \(tokenizer configuration\) is not valid JSON"):
        AutoTokenizer.from_pretrained(folder)


def test_auto_tokenizer_downloads_only_the_tokenizer_files_from_the_hub(
    tmp_path: Path, fresh: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    AutoTokenizer.register("low", LowTokenizer)
    snapshot = _write(tmp_path / "snapshot", tokenizer_config={})
    asked: list[object] = []

    def snapshot_download(repo_id: str, **kwargs: object) -> str:
        asked.append(kwargs["allow_patterns"])
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert AutoTokenizer.from_pretrained("some-org/some-tokenizer")[:2] == ("LowTokenizer", snapshot)
    assert len(asked) == 1 and "tokenizer.json" in asked[0] and "vocab.txt" in asked[0]
    assert not any("safetensors" in pattern or pattern.endswith(".bin") for pattern in asked[0])


def test_a_tokenizer_carried_without_a_config_uses_the_first_backend_with_the_callers_arguments(
    tmp_path: Path, fresh: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from microformers.weights import Checkpoint

    AutoTokenizer.register("low", LowTokenizer)
    files = {"tokenizer.json": {"model": {}}}
    monkeypatch.setattr(Checkpoint, "carried", lambda self, what: files if what == "tokenizer_files" else None)
    assert AutoTokenizer.from_pretrained(tmp_path, "extra", padding_side="left") == (
        "LowTokenizer",
        files,
        ("extra",),
        {"padding_side": "left"},
    )


class Refusing(_Loaded):
    @staticmethod
    def can_load(folder: Path) -> bool:
        return False


def test_backends_registered_without_priority_or_classes_rank_as_priority_zero(tmp_path: Path, fresh: Registry) -> None:
    AutoTokenizer.register("low", LowTokenizer, priority=0)
    fresh.add("tokenizers", "plain", HighTokenizer)  # a plugin's registration may omit priority and classes
    unnamed = _write(tmp_path / "a", tokenizer_config={})
    assert AutoTokenizer.from_pretrained(unnamed)[0] == "LowTokenizer"  # registered first, same priority
    named = _write(tmp_path / "b", tokenizer_config={"tokenizer_class": "plain"})
    assert AutoTokenizer.from_pretrained(named)[0] == "HighTokenizer"


def test_no_backend_for_a_folder_names_the_installed_ones_or_says_none_is_installed(
    tmp_path: Path, fresh: Registry
) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    with pytest.raises(
        UnknownModelTypeError, match=r"^No installed plugin provides tokenizer backend 'fast'\. Installed: none\.$"
    ):
        AutoTokenizer.from_pretrained(folder)
    AutoTokenizer.register("one", Refusing)
    AutoTokenizer.register("two", Refusing)
    expected = (
        f"no installed tokenizer backend can load {folder} (tokenizer_class=None); installed backends: one, two. "
        "It needs tokenizer.json or vocab.txt."
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        AutoTokenizer.from_pretrained(folder)


def test_auto_model_passes_consent_and_code_pins_to_the_remote_config_and_model(
    tmp_path: Path, fresh: Registry, remote_calls: list[tuple]
) -> None:
    AutoModelForCausalLM.register(HeadConfig, LocalHead)
    auto_map = {"AutoConfig": "configuration_head.HeadConfig", "AutoModelForCausalLM": "modeling_head.HeadModel"}
    folder = _write(tmp_path / "a", config={"model_type": "head_toy", "auto_map": auto_map})
    name, args, config, kwargs = AutoModelForCausalLM.from_pretrained(
        folder, "arg", trust_remote_code=True, code_revision="abc", code_sha256="f00", dtype="float16", extra=1
    )
    assert (name, args, type(config)) == ("RemoteHead", ("arg",), RemoteConfig)
    assert kwargs == {"trust_remote_code": True, "dtype": "float16", "extra": 1}
    pins = {"code_revision": "abc", "code_sha256": "f00"}
    assert remote_calls == [
        ("configuration_head.HeadConfig", folder, True, {}, pins, "AutoConfig", auto_map),
        ("modeling_head.HeadModel", folder, True, {}, pins, "AutoModelForCausalLM", auto_map),
    ]
    # without consent the installed plugin's config and model are used and no code is loaded
    name, args, config, kwargs = AutoModelForCausalLM.from_pretrained(folder)
    assert (name, type(config), kwargs) == ("LocalHead", HeadConfig, {})
    assert len(remote_calls) == 2


def test_a_config_folder_given_as_config_is_read_with_the_same_subfolder(tmp_path: Path, fresh: Registry) -> None:
    AutoModelForCausalLM.register(HeadConfig, LocalHead)
    _write(tmp_path / "model" / "inner", config={"model_type": "head_toy"})
    _write(tmp_path / "other", config={"model_type": "head_toy", "marker": "top"})
    _write(tmp_path / "other" / "inner", config={"model_type": "head_toy", "marker": "inner"})
    config = AutoModelForCausalLM.from_pretrained(
        tmp_path / "model", config=str(tmp_path / "other"), subfolder="inner"
    )[2]
    assert config.marker == "inner"


@pytest.fixture
def adapters(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    from microformers.modeling import PreTrainedModel

    loaded: list[tuple] = []
    monkeypatch.setattr(PreTrainedModel, "load_adapter", lambda self, *a, **kw: loaded.append((self, a, kw)))
    return loaded


def test_an_adapter_folder_loads_its_base_model_then_the_adapter(
    saved_toy: Path, tmp_path: Path, adapters: list[tuple]
) -> None:
    adapter = _write(tmp_path / "adapter", adapter_config={"base_model_name_or_path": str(saved_toy)})
    model = AutoModelForCausalLM.from_pretrained(adapter)
    assert model.config.hidden_size == 24
    assert adapters == [(model, (adapter,), {"adapter_name": None})]


def test_adapter_folder_errors_name_the_file_and_what_to_do(tmp_path: Path, adapters: list[tuple]) -> None:
    adapter = _write(tmp_path / "adapter", adapter_config={"r": 8})
    expected = (
        f"{adapter / 'adapter_config.json'} names no base_model_name_or_path: load the base model, "
        f"then call model.load_adapter('{adapter}')"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        AutoModelForCausalLM.from_pretrained(adapter)
    (adapter / "adapter_config.json").write_text("{oops")
    with pytest.raises(ConfigError, match=r"adapter_config\.json \(adapter configuration\) is not valid JSON"):
        AutoModelForCausalLM.from_pretrained(adapter)
    assert adapters == []


def test_auto_model_takes_an_open_checkpoint(saved_toy: Path, adapters: list[tuple]) -> None:
    from microformers.weights import open_checkpoint

    checkpoint, _ = open_checkpoint(saved_toy, {})
    assert AutoModelForCausalLM.from_pretrained(checkpoint).config.hidden_size == 24
    assert adapters == []


class _CarriedConfig(dict):
    source = "weights.gguf (metadata)"


def test_a_config_carried_by_the_weights_file_is_used_and_named_in_errors(
    tmp_path: Path, fresh: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from microformers.weights import Checkpoint

    AutoConfig.register("head_toy", HeadConfig)
    folder = _write(tmp_path / "a", config={"model_type": "head_toy", "marker": "file"})
    carried: dict = {"model_type": "head_toy", "marker": "carried"}
    monkeypatch.setattr(Checkpoint, "carried", lambda self, what: carried if what == "config" else None)
    config = AutoConfig.from_pretrained(folder)
    assert (type(config), config.marker, config.name_or_path) == (HeadConfig, "carried", str(folder))
    carried = _CarriedConfig(marker="carried")
    expected = (
        "weights.gguf (metadata) has no 'model_type'; add one (e.g. \"llama\") so the matching plugin can be found"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        AutoConfig.from_pretrained(folder)
    carried = {"marker": "carried"}  # a carried dict that does not say where it came from
    with pytest.raises(ConfigError, match=f"^{re.escape(str(folder))}/config\\.json has no 'model_type'"):
        AutoConfig.from_pretrained(folder)


def test_no_tokenizer_backend_installed_says_which_distribution_provides_one(tmp_path: Path, fresh: Registry) -> None:
    from microformers import PluginError

    fresh.providers[("tokenizers", "fast")] = "microformers-tokenizers"  # as the built-in providers.json declares
    folder = tmp_path / "a"
    folder.mkdir()
    expected = (
        "No installed plugin provides tokenizer backend 'fast'. Install it with: pip install microformers-tokenizers "
        "Installed: none."
    )
    with pytest.raises(PluginError, match=f"^{re.escape(expected)}$"):
        AutoTokenizer.from_pretrained(folder)


def test_auto_config_errors_name_the_config_file_read(tmp_path: Path, fresh: Registry) -> None:
    folder = _write(tmp_path / "repo" / "sub", config={"hidden_size": 8})
    expected = f"{folder / 'config.json'} has no 'model_type'; add one"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}"):
        AutoConfig.from_pretrained(tmp_path / "repo", subfolder="sub")
    (folder / "config.json").write_text("{oops")
    with pytest.raises(ConfigError, match=r"config\.json \(model configuration\) is not valid JSON"):
        AutoConfig.from_pretrained(folder)


class StrictConfig(PretrainedConfig):
    model_type = "strict_toy"

    def __init__(self, size: int = 1, **kwargs: object) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self.size = size
        super().__init__(**kwargs)


def test_auto_config_names_an_unknown_model_type_and_the_file_with_an_unusable_value(
    tmp_path: Path, fresh: Registry
) -> None:
    unknown = _write(tmp_path / "a", config={"model_type": "unknown_toy"})
    with pytest.raises(UnknownModelTypeError, match=r"^No installed plugin provides model_type 'unknown_toy'\. "):
        AutoConfig.from_pretrained(unknown)
    AutoConfig.register("strict_toy", StrictConfig)
    strict = _write(tmp_path / "b", config={"model_type": "strict_toy", "size": -1})
    expected = f"{strict / 'config.json'} holds a value StrictConfig cannot use (ValueError: size must be >= 0)"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}"):
        AutoConfig.from_pretrained(strict)
    assert AutoConfig.from_pretrained(strict, size=2).size == 2  # keyword overrides reach the class


# From test_auto_mutants.py: Behaviour of ``microformers.auto`` that the mutation pass found unasserted
# (docs/reliability.md).


def test_auto_model_applies_config_overrides_and_keeps_dtype_for_loading(saved_toy: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(saved_toy, torch_dtype=torch.float16, output_hidden_states=True)
    assert model.config.output_hidden_states is True  # a config attribute given as a keyword overrides the file
    assert next(model.parameters()).dtype == torch.float16  # torch_dtype is the loading dtype, not a config edit


def test_register_records_the_config_model_and_architecture(isolated_registry: Callable[..., Registry]) -> None:
    fresh = isolated_registry(auto_module)

    class MutConfig(PretrainedConfig):
        model_type = "mutation_toy"

    class MutModel:
        pass

    AutoModelForCausalLM.register(MutConfig, MutModel)
    assert fresh.require("configs", "mutation_toy") is MutConfig
    assert fresh.require("models", ("mutation_toy", "AutoModelForCausalLM")) is MutModel
    assert fresh.require("architectures", "MutModel") is MutModel


def test_auto_config_for_model_builds_the_registered_class(toy_model: torch.nn.Module) -> None:
    config_class = type(toy_model.config)
    config = AutoConfig.for_model(config_class.model_type, hidden_size=8)
    assert type(config) is config_class and config.hidden_size == 8


# -- second pass: the survivors and "no tests" mutants of the seeded auto.py sample ---------------------


def test_torch_dtype_auto_loads_in_the_checkpoint_dtype(toy_model: torch.nn.Module, tmp_path: Path) -> None:
    toy_model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", torch_dtype="auto")
    assert model.dtype == torch.bfloat16 and model.config.dtype == "bfloat16"


class _LoadedWithoutInputs:
    @classmethod
    def from_pretrained(cls, pretrained: object, **kwargs: object) -> tuple:
        return cls.__name__, Path(pretrained), kwargs

    @classmethod
    def from_files(cls, files: dict, *inputs: object, **kwargs: object) -> tuple:
        return cls.__name__, files


class FeatureRec(_LoadedWithoutInputs):
    pass


class ProcessorRec(_LoadedWithoutInputs):
    pass


class TokenizerMine(_LoadedWithoutInputs):
    pass


class TokenizerOther(_LoadedWithoutInputs):
    pass


@pytest.fixture
def fresh_registry(isolated_registry: Callable[..., Registry]) -> Registry:
    fresh = isolated_registry(auto_module)
    fresh.add("processors", "FeatureRec", FeatureRec, role="feature_extractor", model_types=("proc_toy",))
    fresh.add("processors", "ProcessorRec", ProcessorRec, role="processor", model_types=("proc_toy",))
    fresh.add("tokenizers", "other", TokenizerOther, tokenizer_classes=("OtherTokenizer",), priority=5)
    fresh.add("tokenizers", "mine", TokenizerMine, tokenizer_classes=("MyTokenizer",), priority=0)
    return fresh


def test_a_tokenizer_carried_by_the_weights_file_picks_the_backend_its_config_names(
    saved_toy: Path, fresh_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"tokenizer_config.json": {"tokenizer_class": "MyTokenizer"}, "tokenizer.json": {"model": {}}}
    monkeypatch.setattr(Checkpoint, "carried", lambda self, what: files if what == "tokenizer_files" else None)
    assert AutoTokenizer.from_pretrained(saved_toy) == ("TokenizerMine", files)  # not the higher-priority one


def test_auto_feature_extractor_by_type_or_by_model_type(tmp_path: Path, fresh_registry: Registry) -> None:
    by_type = _write(tmp_path / "a", preprocessor_config={"feature_extractor_type": "FeatureRec"})
    assert AutoFeatureExtractor.from_pretrained(by_type, sampling_rate=8) == (
        "FeatureRec",
        by_type,
        {"sampling_rate": 8},
    )
    by_model = _write(tmp_path / "b", config={"model_type": "proc_toy"})
    assert AutoFeatureExtractor.from_pretrained(by_model) == ("FeatureRec", by_model, {})
    broken = tmp_path / "c"
    broken.mkdir()
    (broken / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"\(preprocessor_config\.json\) is not valid JSON"):
        AutoFeatureExtractor.from_pretrained(broken)


def test_auto_processor_falls_back_to_the_model_type_processor_then_the_feature_extractor(
    tmp_path: Path, fresh_registry: Registry
) -> None:
    with_tokenizer = _write(tmp_path / "a", config={"model_type": "proc_toy"}, tokenizer_config={"model_max_length": 8})
    assert AutoProcessor.from_pretrained(with_tokenizer) == ("ProcessorRec", with_tokenizer, {})
    audio_only = _write(tmp_path / "b", preprocessor_config={"feature_extractor_type": "FeatureRec"})
    assert AutoProcessor.from_pretrained(audio_only) == ("FeatureRec", audio_only, {})
    unknown = _write(tmp_path / "c", tokenizer_config={"processor_class": "MissingProcessor"})
    with pytest.raises(MicroformersError, match=r"^No installed plugin provides processor 'MissingProcessor'\."):
        AutoProcessor.from_pretrained(unknown)

"""``microformers.pipelines`` behaviour the full mutation run (docs/reliability.md, every mutant of the module)
found unasserted: registration metadata, task lookup, what ``pipeline()`` passes to the config, model, tokenizer
and pipeline class, default models, custom pipelines, task inference and the head checks with their messages.

Tasks live in a private registry; model, config and tokenizer loading are replaced by recorders, so nothing here
reads a checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import microformers
from microformers import ConfigError, MicroformersError
from microformers import auto as auto_module
from microformers import pipelines as pipelines_module
from microformers import remote as remote_module
from microformers.configuration import PretrainedConfig
from microformers.pipelines import (
    PIPELINE_REGISTRY,
    _default_model_id,
    _head_names,
    _tokenizer_source_of,
    check_checkpoint_head,
    check_model_head,
    pipeline,
    supported_tasks,
)
from microformers.plugins import IN_PROCESS, Registry


class FakeConfig(PretrainedConfig):
    model_type = "fake"


class Recorder:
    needs_model = True
    needs_tokenizer = True

    def __init__(self, model: Any, tokenizer: Any, **kwargs: Any) -> None:
        self.model, self.tokenizer, self.kwargs = model, tokenizer, kwargs


class Modelless(Recorder):
    needs_model = False
    needs_tokenizer = False


class FakeHead(torch.nn.Module):
    """What a fake Auto class returns: remembers how it was loaded."""

    def __init__(self, head: str, name: str, kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.head, self.loaded_from, self.load_kwargs = head, name, kwargs
        self.config = kwargs.get("config")
        self.name_or_path = name


class OtherHead(torch.nn.Module):
    pass


class Loads:
    """Replaces config, model and tokenizer loading; records every call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, config: PretrainedConfig | None = None) -> None:
        self.configs: list[tuple[str, dict[str, Any]]] = []
        self.models: list[tuple[str, str, dict[str, Any]]] = []
        self.tokenizers: list[tuple[str, dict[str, Any]]] = []
        self.failing: dict[str, str] = {}
        self.config = config if config is not None else FakeConfig()
        monkeypatch.setattr(auto_module.AutoConfig, "from_pretrained", self._config)
        monkeypatch.setattr(auto_module.AutoTokenizer, "from_pretrained", self._tokenizer)
        monkeypatch.setattr(auto_module, "auto_class", self._auto_class)

    def _config(self, name: str, **kwargs: Any) -> PretrainedConfig:
        self.configs.append((name, kwargs))
        return self.config

    def _tokenizer(self, name: str, **kwargs: Any) -> str:
        self.tokenizers.append((name, kwargs))
        return f"tokenizer of {name}"

    def _auto_class(self, head: str) -> Any:
        loads = self

        class Auto:
            @staticmethod
            def from_pretrained(name: str, **kwargs: Any) -> FakeHead:
                loads.models.append((head, name, kwargs))
                if head in loads.failing:
                    raise ConfigError(loads.failing[head])
                return FakeHead(head, name, kwargs)

        return Auto


@pytest.fixture
def tasks(isolated_registry: Callable[..., Registry]) -> Registry:
    fresh = isolated_registry(pipelines_module)
    fresh.add("pipelines", "rec", Recorder, model_class=("AutoModelForA",), default_model="default/model", aliases=())
    fresh.add("pipelines", "two", Recorder, model_class=("AutoModelForA", "AutoModelForB"), default_model=None)
    fresh.add("pipelines", "any", Recorder, model_class=(), default_model=None)
    fresh.add("pipelines", "free", Modelless, model_class=(), default_model=None)
    return fresh


# -- the old import path ---------------------------------------------------------------------------
def test_old_path_gives_the_plugin_base_classes_and_names_a_missing_attribute() -> None:
    assert pipelines_module.Pipeline is microformers.Pipeline
    assert pipelines_module.ChunkPipeline is microformers.ChunkPipeline
    with pytest.raises(AttributeError) as info:
        pipelines_module.NoSuchThing  # noqa: B018
    assert str(info.value) == "module 'microformers.pipelines' has no attribute 'NoSuchThing'"


# -- registration ----------------------------------------------------------------------------------
def test_register_pipeline_records_every_field(tasks: Registry) -> None:
    class Head:
        auto_name = "AutoModelForZ"

    PIPELINE_REGISTRY.register_pipeline(
        "t1",
        Recorder,
        pt_model="AutoModelForIgnored",
        default=("id/one", "rev"),
        type="text",
        aliases=["a1", "a2"],
        model_class=["AutoModelForY", Head],
    )
    reg = tasks.get("pipelines", "t1")
    assert reg is not None and reg.ref is Recorder and reg.plugin == IN_PROCESS
    assert reg.meta == {
        "model_class": ("AutoModelForY", "AutoModelForZ"),
        "default_model": "id/one",
        "aliases": ("a1", "a2"),
        "type": "text",
    }
    PIPELINE_REGISTRY.register_pipeline("t2", "pkg.mod:Cls", pt_model=(Head, "AutoModel"))
    reg = tasks.get("pipelines", "t2")
    assert reg is not None and reg.ref == "pkg.mod:Cls"
    assert reg.meta == {
        "model_class": ("AutoModelForZ", "AutoModel"),
        "default_model": None,
        "aliases": (),
        "type": None,
    }


@pytest.mark.parametrize("task", ["", 3, None])
def test_register_pipeline_refuses_a_task_that_is_not_a_name(tasks: Registry, task: Any) -> None:
    with pytest.raises(ConfigError) as info:
        PIPELINE_REGISTRY.register_pipeline(task, Recorder)
    assert str(info.value) == f"register_pipeline: task must be a non-empty string, got {task!r}"


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        (None, None),
        ("alias", "alias"),
        ({"pt": ("id/pt", "rev")}, "id/pt"),
        ({"model": "id/model"}, "id/model"),
        ({"pt": "first", "model": "second"}, "first"),
        ({"tf": "x", "model": ["listed"]}, "listed"),
        (["in/list"], "in/list"),
        ((("nested", "rev"),), "nested"),
    ],
)
def test_default_model_forms(default: Any, expected: str | None) -> None:
    assert _default_model_id(default) == expected


@pytest.mark.parametrize("default", [5, (), [], {}, {"tf": "x"}])
def test_default_model_that_names_no_model_is_refused(default: Any) -> None:
    with pytest.raises(ConfigError) as info:
        _default_model_id(default)
    assert str(info.value) == f"default={default!r}: give a model id or alias, or {{'pt': ('model-id', 'revision')}}"


def test_head_names_of_every_form() -> None:
    class Plain:
        pass

    class Unnamed:
        auto_name = None

    assert _head_names(None) == ()
    assert _head_names("AutoModelForX") == ("AutoModelForX",)
    assert _head_names(Plain) == ("Plain",)
    assert _head_names(Unnamed) == ("Unnamed",)
    assert _head_names(auto_module.AutoModelForMaskedLM) == ("AutoModelForMaskedLM",)
    assert _head_names(["A", ("B", [Plain]), None]) == ("A", "B", "Plain")


def test_supported_tasks_are_sorted_names_and_aliases_once(tasks: Registry) -> None:
    PIPELINE_REGISTRY.register_pipeline("zeta", Recorder, aliases=("beta", "any"))
    PIPELINE_REGISTRY.register_pipeline("alpha", Recorder, aliases=("beta",))
    expected = ["alpha", "any", "beta", "free", "rec", "two", "zeta"]
    assert PIPELINE_REGISTRY.get_supported_tasks() == expected
    assert supported_tasks() == expected


def test_check_task_resolves_names_and_aliases(tasks: Registry) -> None:
    PIPELINE_REGISTRY.register_pipeline("canon", Modelless, aliases=("other", "rec"))
    name, reg = PIPELINE_REGISTRY.check_task("canon")
    assert name == "canon" and reg is tasks.get("pipelines", "canon")
    name, reg = PIPELINE_REGISTRY.check_task("other")
    assert name == "canon" and reg is tasks.get("pipelines", "canon")
    name, reg = PIPELINE_REGISTRY.check_task("rec")  # a task's own name wins over another task's alias
    assert name == "rec" and reg is tasks.get("pipelines", "rec")
    with pytest.raises(MicroformersError) as info:
        PIPELINE_REGISTRY.check_task("missing")
    assert str(info.value).startswith("No installed plugin provides pipeline task 'missing'.")


def test_to_dict_has_every_task(tasks: Registry) -> None:
    table = PIPELINE_REGISTRY.to_dict()
    assert sorted(table) == ["any", "free", "rec", "two"]
    assert table["rec"] == {
        "impl": Recorder,
        "plugin": IN_PROCESS,
        "model_class": ("AutoModelForA",),
        "default_model": "default/model",
        "aliases": (),
    }


# -- pipeline(): what reaches the config, the model, the tokenizer and the class -----------------------
def test_loading_arguments_go_to_loading_and_options_to_the_pipeline(
    tasks: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = Loads(monkeypatch)
    hub = {"revision": "r1", "cache_dir": "/c", "subfolder": "sub", "token": "t", "local_files_only": True}
    built = pipeline("rec", model="org/model", use_safetensors=False, trust_remote_code=True, top_k=3, **hub)
    loading = {**hub, "use_safetensors": False, "trust_remote_code": True}
    assert loads.configs == [("org/model", loading)]
    assert loads.models == [("AutoModelForA", "org/model", {**loading, "config": loads.config})]
    without_subfolder = {k: v for k, v in loading.items() if k != "subfolder"}
    assert loads.tokenizers == [("org/model", without_subfolder)]
    assert isinstance(built, Recorder) and built.model.loaded_from == "org/model"
    assert built.tokenizer == "tokenizer of org/model"
    assert built.kwargs == {"task": "rec", "device": None, "dtype": None, "batch_size": None, "top_k": 3}


def test_device_batch_size_and_dtype_reach_the_pipeline_or_the_model(
    tasks: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = Loads(monkeypatch)
    built = pipeline("rec", model=Path("/m"), device="cpu", batch_size=4, dtype=torch.float16)
    assert loads.models[0][1] == "/m" and loads.models[0][2]["dtype"] == torch.float16
    assert built.kwargs == {"task": "rec", "device": "cpu", "dtype": None, "batch_size": 4}  # the model has it
    given = FakeHead("AutoModelForA", "x", {})
    built = pipeline("rec", model=given, tokenizer="tok", dtype=torch.float16)
    assert built.model is given and built.kwargs["dtype"] == torch.float16  # the pipeline casts a given model


def test_torch_dtype_is_the_older_name_of_dtype(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    pipeline("rec", model="m", torch_dtype=torch.bfloat16)
    pipeline("rec", model="m", torch_dtype=torch.bfloat16, dtype=torch.bfloat16)
    assert [kwargs["dtype"] for _, _, kwargs in loads.models] == [torch.bfloat16, torch.bfloat16]
    with pytest.raises(ConfigError) as info:
        pipeline("rec", model="m", dtype=torch.float16, torch_dtype=torch.bfloat16)
    assert str(info.value) == (
        "pipeline(): pass dtype= or torch_dtype= (the same thing), not both (torch.float16, torch.bfloat16)"
    )


def test_device_map_is_a_loading_argument(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    pipeline("rec", model="m", device_map="auto", model_kwargs={"attn_implementation": "eager"})
    assert loads.models[-1][2] == {"config": loads.config, "attn_implementation": "eager", "device_map": "auto"}
    pipeline("rec", device_map={"": "cpu"})  # the task's default model
    assert loads.models[-1][1:] == ("default/model", {"config": loads.config, "device_map": {"": "cpu"}})
    message = "pipeline(device_map=...) places a model loaded from a name or folder; pass device= instead"
    with pytest.raises(ConfigError) as info:
        pipeline("rec", model="m", device_map="auto", device="cpu")
    assert str(info.value) == message
    with pytest.raises(ConfigError) as info:
        pipeline("rec", model=FakeHead("AutoModelForA", "x", {}), device_map="auto")
    assert str(info.value) == message


def test_model_kwargs_reach_the_model_only(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    built = pipeline("rec", model="m", model_kwargs={"low_cpu_mem_usage": True})
    assert loads.models[0][2] == {"config": loads.config, "low_cpu_mem_usage": True}
    assert loads.configs == [("m", {})] and loads.tokenizers == [("m", {})]
    assert "low_cpu_mem_usage" not in built.kwargs


def test_config_given_as_a_name_or_object(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    pipeline("rec", model="m", config="config/source", revision="v2")
    assert loads.configs == [("config/source", {"revision": "v2"})]
    given = FakeConfig(hidden_size=7)
    pipeline("rec", model="m", config=given)
    assert len(loads.configs) == 1 and loads.models[-1][2]["config"] is given
    pipeline("rec", model=Path("/folder"))
    assert loads.configs[-1] == ("/folder", {})


def test_the_default_model_and_its_tokenizer(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    built = pipeline("rec", revision="r")
    assert loads.configs == [("default/model", {"revision": "r"})]  # no config yet: loaded for the default
    assert loads.models == [("AutoModelForA", "default/model", {"revision": "r", "config": loads.config})]
    assert built.model.loaded_from == "default/model" and built.tokenizer == "tokenizer of default/model"


def test_a_task_that_needs_no_model_or_tokenizer(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    built = pipeline("free")
    assert built.model is None and built.tokenizer is None and isinstance(built, Modelless)
    assert loads.configs == loads.models == loads.tokenizers == []
    built = pipeline("free", model="m")
    assert built.tokenizer is None and loads.tokenizers == []
    built = pipeline("free", model=FakeHead("AutoModel", "named", {}))
    assert built.tokenizer is None


def test_a_task_without_a_default_model_names_its_head(tasks: Registry) -> None:
    with pytest.raises(ConfigError) as info:
        pipeline("any")
    assert str(info.value) == (
        "task 'any' has no default model: pass model='<folder, Hub id or alias>' (a checkpoint with a AutoModel head)"
    )


def test_pipeline_class_overrides_the_registered_one(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    Loads(monkeypatch)
    built = pipeline("rec", model="m", pipeline_class=Modelless)
    assert type(built) is Modelless and built.tokenizer is None and built.kwargs["task"] == "rec"


def test_an_alias_builds_the_canonical_task(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    Loads(monkeypatch)
    PIPELINE_REGISTRY.register_pipeline("canon", Recorder, aliases=("nick",), pt_model="AutoModelForC")
    built = pipeline("nick", model="m")
    assert built.kwargs["task"] == "canon" and built.model.head == "AutoModelForC"


# -- pipeline(): a model object and its tokenizer -----------------------------------------------------
def test_tokenizer_source_of_a_model_object() -> None:
    model = FakeHead("AutoModel", "own/name", {"config": FakeConfig(name_or_path="config/name")})
    assert _tokenizer_source_of(model) == "own/name"
    model.name_or_path = ""
    assert _tokenizer_source_of(model) == "config/name"
    model.name_or_path = Path("/a/path")
    assert _tokenizer_source_of(model) == "/a/path"
    model.config = None
    model.name_or_path = None
    assert _tokenizer_source_of(model) is None
    assert _tokenizer_source_of(object()) is None


def test_a_model_object_brings_its_tokenizer(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    model = FakeHead("AutoModel", "where/from", {"config": FakeConfig()})
    built = pipeline("any", model=model, revision="r", subfolder="s")
    assert built.model is model and built.tokenizer == "tokenizer of where/from"
    assert loads.tokenizers == [("where/from", {"revision": "r"})] and loads.models == []
    given = object()
    assert pipeline("any", model=model, tokenizer=given).tokenizer is given


# -- custom pipelines saved in a folder's config ---------------------------------------------------------
def test_custom_class_needs_an_impl(tmp_path: Path) -> None:
    for info in (None, {"pt": "AutoModel"}, {"impl": 3}):
        with pytest.raises(ConfigError) as caught:
            pipelines_module._custom_class(info, "my-task", tmp_path, True, {})
        assert (
            str(caught.value)
            == f"{tmp_path}: custom_pipelines['my-task'] in config.json needs an 'impl': 'module.ClassName'"
        )


def test_custom_class_is_loaded_as_remote_code_with_the_hub_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(remote_module, "load_remote_class", lambda *args: calls.append(args) or Recorder)
    found = pipelines_module._custom_class(
        {"impl": "code.Mine"}, "t", "/src", True, {"revision": "r", "use_safetensors": False, "trust_remote_code": True}
    )
    assert found is Recorder
    assert calls == [("code.Mine", "/src", True, {"revision": "r"}, {}, "pipeline task 't'")]


def test_a_custom_pipeline_in_the_config(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    config = FakeConfig(custom_pipelines={"mine": {"impl": "code.Mine", "pt": ["AutoModelForM"]}, "x": {"impl": "a.B"}})
    loads = Loads(monkeypatch, config)
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(remote_module, "load_remote_class", lambda *args: calls.append(args) or Recorder)
    built = pipeline("mine", model="folder", trust_remote_code=True, revision="r")
    assert calls == [("code.Mine", "folder", True, {"revision": "r"}, {}, "pipeline task 'mine'")]
    assert built.model.head == "AutoModelForM" and built.kwargs["task"] == "mine"
    built = pipeline("x", model="folder")  # no 'pt': any head
    assert built.model.head == "AutoModel" and calls[-1][2] is None
    assert [head for head, _, _ in loads.models] == ["AutoModelForM", "AutoModel"]
    built = pipeline("x", model="folder", pipeline_class=Modelless)  # a given class: no remote code
    assert type(built) is Modelless and len(calls) == 2


def test_a_custom_pipeline_without_a_model_folder(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """No folder to load the code from: a clear error (was an UnboundLocalError, or a Hub lookup of 'None')."""
    config = FakeConfig(custom_pipelines={"mine": {"impl": "code.Mine"}})
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(remote_module, "load_remote_class", lambda *args: calls.append(args) or Recorder)
    for model in (None, OtherHead()):
        with pytest.raises(ConfigError) as info:
            pipeline("mine", model=model, config=config, trust_remote_code=True)
        assert "custom_pipelines['mine']" in str(info.value) and "model='<folder or Hub id>'" in str(info.value)
    assert calls == []
    with pytest.raises(ConfigError, match="task 'mine' has no default model"):  # a given class: no code to load
        pipeline("mine", config=config, pipeline_class=Recorder)
    assert type(pipeline("mine", config=config, pipeline_class=Modelless)) is Modelless


# -- task inference -----------------------------------------------------------------------------------
def test_a_model_object_without_a_config_needs_a_task(tasks: Registry) -> None:
    with pytest.raises(ConfigError) as info:
        pipeline(model=OtherHead())
    assert str(info.value) == (
        "pipeline(): pass a task, e.g. pipeline('text-generation', model=...); OtherHead has no config to infer one from"
    )


def test_one_custom_pipeline_names_the_task(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    config = FakeConfig(custom_pipelines={"rec": {"impl": "code.Mine"}})
    Loads(monkeypatch, config)
    monkeypatch.setattr(remote_module, "load_remote_class", lambda *args: Recorder)
    assert pipeline(model="folder").kwargs["task"] == "rec"


def test_the_saved_head_names_the_task(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks.add("models", ("fake", "AutoModelForA"), "pkg.modeling:FakeForA")
    tasks.add("models", ("fake", "AutoModelForB"), "pkg.modeling:FakeForB")
    tasks.add("models", ("other", "AutoModelForC"), "pkg.modeling:FakeForA")
    PIPELINE_REGISTRY.register_pipeline("only-c", Recorder, pt_model="AutoModelForC")
    config = FakeConfig(architectures=["FakeForA"], custom_pipelines={"x": {}, "y": {}})  # two: not a choice
    Loads(monkeypatch, config)
    with pytest.raises(ConfigError) as info:
        pipeline(model="folder")
    assert (
        str(info.value)
        == "pipeline(): pass a task, e.g. pipeline('text-generation', model=...); tasks that fit this model: rec, two"
    )
    config.architectures = ["FakeForB"]
    assert pipeline(model="folder").kwargs["task"] == "two"
    config.architectures = None
    with pytest.raises(ConfigError) as info:
        pipeline(model="folder")
    assert str(info.value).endswith("; installed tasks: any, free, only-c, rec, two")


def test_no_task_and_no_model_lists_the_installed_tasks(
    tasks: Registry, isolated_registry: Callable[..., Registry]
) -> None:
    with pytest.raises(ConfigError) as info:
        pipeline()
    assert str(info.value) == (
        "pipeline(): pass a task, e.g. pipeline('text-generation', model=...); installed tasks: any, free, rec, two"
    )
    isolated_registry(pipelines_module)
    with pytest.raises(ConfigError) as info:
        pipeline()
    assert str(info.value).endswith("; installed tasks: none")


# -- loading with one of several heads ----------------------------------------------------------------
def test_the_first_head_that_loads_wins(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    loads.failing = {"AutoModelForA": "no A for fake"}
    built = pipeline("two", model="m")
    assert built.model.head == "AutoModelForB" and [h for h, _, _ in loads.models] == ["AutoModelForA", "AutoModelForB"]
    loads.failing["AutoModelForB"] = "no B either"
    with pytest.raises(ConfigError) as info:
        pipeline("two", model="m")
    assert (
        str(info.value) == "task 'two' cannot use model 'm': AutoModelForA: no A for fake; AutoModelForB: no B either"
    )
    with pytest.raises(ConfigError) as info:
        pipeline("rec", model="m")
    assert str(info.value) == "task 'rec' cannot use model 'm': no A for fake"
    assert isinstance(info.value.__cause__, ConfigError)


# -- head checks ----------------------------------------------------------------------------------------
@pytest.fixture
def heads(tasks: Registry) -> Registry:
    tasks.add("models", ("fake", "AutoModelForA"), FakeHead)
    tasks.add("models", ("fake", "AutoModelForB"), OtherHead)
    tasks.add("architectures", "FakeHead", FakeHead, model_type="fake")
    tasks.add("architectures", "OtherHead", OtherHead, model_type="fake")
    return tasks


def test_a_checkpoint_with_another_head_is_refused(heads: Registry) -> None:
    saved = FakeConfig(architectures=["OtherHead"])
    with pytest.raises(ConfigError) as info:
        check_checkpoint_head(saved, "rec", ("AutoModelForA", "AutoModelForZ"), "org/name")
    assert str(info.value) == (
        "task 'rec' needs a model with a AutoModelForA or AutoModelForZ head, but 'org/name' was saved as "
        "OtherHead (its config.json 'architectures'); loading it for this task would leave the head untrained. "
        "Use a checkpoint trained for 'rec' (FakeHead)."
    )
    check_checkpoint_head(FakeConfig(architectures=["FakeHead"]), "rec", ("AutoModelForA",), "n")  # fits
    check_checkpoint_head(FakeConfig(architectures=["OtherHead", "FakeHead"]), "rec", ("AutoModelForA",), "n")
    check_checkpoint_head(FakeConfig(architectures=["OtherHead"]), "any", ("AutoModel", "AutoModelForA"), "n")
    check_checkpoint_head(FakeConfig(), "rec", ("AutoModelForA",), "n")  # nothing saved: nothing to compare
    check_checkpoint_head(FakeConfig(architectures=["OtherHead", "Unknown"]), "rec", ("AutoModelForA",), "n")
    check_checkpoint_head(FakeConfig(architectures=["OtherHead"]), "rec", ("AutoModelForZ",), "n")  # no such head
    heads.add("models", ("fake", "AutoModelForC"), OtherHead)
    with pytest.raises(ConfigError) as info:
        check_checkpoint_head(FakeConfig(architectures=["FakeHead"]), "t", ("AutoModelForB", "AutoModelForC"), "n")
    assert "Use a checkpoint trained for 't' (OtherHead)." in str(info.value)


def test_a_refused_checkpoint_is_not_loaded(heads: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch, FakeConfig(architectures=["OtherHead"]))
    with pytest.raises(ConfigError, match="^task 'rec' needs a model with a AutoModelForA head, but 'm' was saved as"):
        pipeline("rec", model="m")
    assert loads.models == []
    assert pipeline("any", model="m").model.head == "AutoModel"


def test_a_model_object_with_another_head_is_refused(heads: Registry) -> None:
    model = OtherHead()
    model.config = FakeConfig()
    with pytest.raises(ConfigError) as info:
        check_model_head(model, "rec", ("AutoModelForA", "AutoModelForZ"))
    assert str(info.value) == (
        "task 'rec' needs a model with a AutoModelForA or AutoModelForZ head (FakeHead), got OtherHead; "
        "load it with AutoModelForA.from_pretrained(...)"
    )
    with pytest.raises(ConfigError, match=r"head \(FakeHead, OtherHead\), got FakeConfigless;"):
        check_model_head(FakeConfigless(), "t", ("AutoModelForA", "AutoModelForB"))
    check_model_head(model, "t", ("AutoModelForZ", "AutoModelForB"))  # one of the registered heads
    check_model_head(model, "t", ("AutoModelForB", "AutoModelForA"))
    check_model_head(model, "t", ("AutoModelForA", "AutoModel"))  # any model will do
    check_model_head(model, "t", ("AutoModelForZ",))  # no head registered: nothing to compare
    check_model_head(object(), "t", ("AutoModelForA",))  # not a torch module
    with pytest.raises(ConfigError, match="got OtherHead"):
        pipeline("rec", model=model)


class FakeConfigless(torch.nn.Module):
    """A model whose class is neither registered head, with a config of the registered type."""

    def __init__(self) -> None:
        super().__init__()
        self.config = FakeConfig()


def test_a_model_object_without_parameters_is_not_checked(heads: Registry) -> None:
    class Holder:
        parameters = "not callable"
        config = FakeConfig()

    check_model_head(Holder(), "rec", ("AutoModelForA",))


def test_a_torch_module_without_a_config_is_not_checked(heads: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    check_model_head(OtherHead(), "rec", ("AutoModelForA",))
    Loads(monkeypatch)
    model = OtherHead()
    built = pipeline("rec", model=model, tokenizer="tok")
    assert built.model is model and built.tokenizer == "tokenizer of tok"


def test_a_refused_checkpoint_lists_every_saved_and_fitting_class(heads: Registry) -> None:
    heads.add("models", ("fake", "AutoModelForC"), "pkg.modeling:ThirdHead")
    heads.add("architectures", "ThirdHead", "pkg.modeling:ThirdHead", model_type="fake")
    heads.add("architectures", "Saved", "pkg.modeling:Saved", model_type="fake")
    with pytest.raises(ConfigError) as info:
        check_checkpoint_head(
            FakeConfig(architectures=["OtherHead", "Saved"]), "t", ("AutoModelForC", "AutoModelForA"), "n"
        )
    assert str(info.value) == (
        "task 't' needs a model with a AutoModelForC or AutoModelForA head, but 'n' was saved as OtherHead, Saved "
        "(its config.json 'architectures'); loading it for this task would leave the head untrained. "
        "Use a checkpoint trained for 't' (FakeHead, ThirdHead)."
    )


def test_a_config_like_object_without_the_fields_is_not_checked(heads: Registry) -> None:
    check_checkpoint_head(SimpleNamespace(), "rec", ("AutoModelForA",), "n")
    check_checkpoint_head(SimpleNamespace(architectures=["OtherHead"]), "rec", ("AutoModelForA",), "n")  # no type
    with pytest.raises(ConfigError, match="was saved as OtherHead"):
        check_checkpoint_head(
            SimpleNamespace(architectures=["OtherHead"], model_type="fake"), "rec", ("AutoModelForA",), "n"
        )


def test_a_custom_pipeline_for_a_model_object_without_a_name(tasks: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    Loads(monkeypatch)
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(remote_module, "load_remote_class", lambda *args: calls.append(args) or Recorder)
    model = OtherHead()
    model.config = FakeConfig(custom_pipelines={"mine": {"impl": "code.Mine"}})
    built = pipeline("mine", model=model, pipeline_class=Modelless)
    assert type(built) is Modelless and built.model is model and calls == []
    with pytest.raises(ConfigError, match="no folder or Hub id"):  # no name to look the code up in
        pipeline("mine", model=model, tokenizer="tok")
    assert calls == []

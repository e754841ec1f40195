"""The kernel's pipeline machinery: registration (entry point and in-process), dispatch, batching, errors.

No first-party plugin is needed: tasks here are registered in-process or by the test plugin
``microformers-test-mytask`` (tests/plugins/mytask) through a real entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import microformers
from microformers import ChunkPipeline, ConfigError, MicroformersError, Pipeline, PluginError, UnknownModelTypeError
from microformers import auto as auto_module
from microformers import pipelines as pipelines_module
from microformers import remote as remote_module
from microformers.configuration import PretrainedConfig
from microformers.errors import DeviceError
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
from microformers.plugins import IN_PROCESS, Registry, registry
from microformers_pipelines.base import resolve_device


class CharTokenizer:
    """Code points as token ids; 0 pads."""

    pad_token_id = 0
    padding_side = "right"

    def __call__(self, text: str) -> dict[str, torch.Tensor]:
        ids = torch.tensor([[ord(c) for c in text]])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class SumModel(torch.nn.Module):
    """Records every batch it sees; returns per-row sums of the real tokens.

    exact: the sums are of small integers, exact in float in any order and batch, so tests compare them with ==.
    """

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.batches: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        self.batches.append(input_ids.clone())
        return {"sums": (input_ids * attention_mask).sum(-1) * self.weight}


class SumPipeline(Pipeline):
    def _sanitize_parameters(self, scale: int | None = None, **rest: Any) -> tuple[dict, dict, dict]:
        if rest:
            raise ConfigError(f"unknown {sorted(rest)}")
        return {}, {}, ({} if scale is None else {"scale": scale})

    def preprocess(self, text: str) -> dict[str, Any]:
        return {**self.tokenizer(text), "text": text}

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        out = self.model(inputs["input_ids"], inputs["attention_mask"])
        return {"sums": out["sums"], "text": inputs["text"], "input_ids": inputs["input_ids"]}

    def postprocess(self, outputs: dict[str, Any], scale: int = 1) -> dict[str, Any]:
        return {"text": outputs["text"], "sum": int(outputs["sums"][0]) * scale, "width": outputs["input_ids"].shape[1]}


class WindowPipeline(ChunkPipeline):
    """Splits a text into 2-character windows; postprocess receives all windows of one input."""

    def preprocess(self, text: str) -> Iterator[dict[str, Any]]:
        for start in range(0, len(text), 2):
            yield self.tokenizer(text[start : start + 2])

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return self.model(inputs["input_ids"], inputs["attention_mask"])

    def postprocess(self, windows: list[dict[str, Any]]) -> list[int]:
        return [int(w["sums"][0]) for w in windows]


def expected_sum(text: str) -> int:
    return sum(ord(c) for c in text)


@pytest.fixture
def sum_pipe() -> SumPipeline:
    return SumPipeline(SumModel(), CharTokenizer(), task="sum")


@pytest.fixture
def registered_task():
    PIPELINE_REGISTRY.register_pipeline("kernel-test-sum", SumPipeline, aliases=("kernel-test-alias",))
    yield "kernel-test-sum"
    registry._entries.pop(("pipelines", "kernel-test-sum"), None)


# -- running -------------------------------------------------------------------------------------
def test_single_list_and_generator_inputs(sum_pipe):
    assert sum_pipe("ab") == {"text": "ab", "sum": expected_sum("ab"), "width": 2}
    texts = ["a", "hello", "xyz"]
    assert [r["sum"] for r in sum_pipe(texts)] == [expected_sum(t) for t in texts]
    assert [r["sum"] for r in sum_pipe(tuple(texts))] == [expected_sum(t) for t in texts]
    stream = sum_pipe(t for t in texts)
    assert isinstance(stream, Iterator) and not isinstance(stream, list)
    assert [r["text"] for r in stream] == texts


def test_generator_is_consumed_lazily_in_batches(sum_pipe):
    pulled: list[str] = []

    def source() -> Iterator[str]:
        for text in ["a", "bb", "ccc", "dddd", "eeeee"]:
            pulled.append(text)
            yield text

    results = sum_pipe(source(), batch_size=2)
    assert pulled == []
    first = next(results)
    assert first["text"] == "a" and pulled == ["a", "bb"]
    assert [r["text"] for r in results] == ["bb", "ccc", "dddd", "eeeee"]


def test_batching_pads_and_keeps_order(sum_pipe):
    texts = ["a", "hello", "xyz", "q"]
    results = sum_pipe(texts, batch_size=3)
    assert [r["sum"] for r in results] == [expected_sum(t) for t in texts]
    first_batch = sum_pipe.model.batches[0]
    assert first_batch.shape == (3, 5)
    assert first_batch[0].tolist() == [ord("a"), 0, 0, 0, 0]  # right padding with the pad id
    assert [r["width"] for r in results] == [5, 5, 5, 1]  # each row keeps its (padded) batch width


def test_padding_side_comes_from_the_tokenizer(sum_pipe):
    sum_pipe.tokenizer.padding_side = "left"
    sum_pipe(["a", "bcd"], batch_size=2)
    assert sum_pipe.model.batches[0][0].tolist() == [0, 0, ord("a")]


def test_batch_size_from_construction_and_call(sum_pipe):
    pipe = SumPipeline(SumModel(), CharTokenizer(), batch_size=4)
    pipe(["a", "b", "c", "d", "e"])
    assert [b.shape[0] for b in pipe.model.batches] == [4, 1]
    pipe.model.batches.clear()
    pipe(["a", "b", "c"], batch_size=1)
    assert [b.shape[0] for b in pipe.model.batches] == [1, 1, 1]
    with pytest.raises(ConfigError, match="batch_size"):
        pipe(["a"], batch_size=0)


def test_parameters_at_construction_and_call(sum_pipe):
    pipe = SumPipeline(SumModel(), CharTokenizer(), scale=10)
    assert pipe("a")["sum"] == 10 * expected_sum("a")
    assert pipe("a", scale=2)["sum"] == 2 * expected_sum("a")
    with pytest.raises(ConfigError, match="unknown"):
        pipe("a", nonsense=1)


def test_chunk_pipeline_regroups_windows_per_input():
    pipe = WindowPipeline(SumModel(), CharTokenizer(), batch_size=3)
    texts = ["abcde", "xy", "hello world"]
    expected = [[expected_sum(t[i : i + 2]) for i in range(0, len(t), 2)] for t in texts]
    assert pipe(texts) == expected
    assert pipe("abcde") == expected[0]
    assert max(b.shape[0] for b in pipe.model.batches) == 3


def test_padding_without_pad_token_is_a_clear_error(sum_pipe):
    sum_pipe.tokenizer.pad_token_id = None
    with pytest.raises(ConfigError, match="pad token"):
        sum_pipe(["a", "bcd"], batch_size=2)
    assert [r["sum"] for r in sum_pipe(["a", "bcd"])] == [expected_sum("a"), expected_sum("bcd")]


def test_model_goes_to_eval_mode_and_device(sum_pipe, monkeypatch):
    model = SumModel().train()
    pipe = SumPipeline(model, CharTokenizer(), device="cpu", dtype="float64")
    assert not model.training and model.weight.dtype == torch.float64
    assert pipe.device == torch.device("cpu")
    assert resolve_device(-1) == torch.device("cpu")
    # a CUDA index names a CUDA device where there is one (simulated), and is refused where there is none
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device(0) == torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match=r"^device=0: this machine has no cuda device"):
        resolve_device(0)
    with pytest.raises(ConfigError, match="device"):
        resolve_device("not a device")


def test_missing_tokenizer_is_a_clear_error():
    with pytest.raises(ConfigError, match="tokenizer"):
        SumPipeline(SumModel(), None, task="sum")


# -- registration and dispatch -------------------------------------------------------------------
def test_in_process_registration_and_alias(registered_task):
    assert registered_task in PIPELINE_REGISTRY.get_supported_tasks()
    assert "kernel-test-alias" in PIPELINE_REGISTRY.get_supported_tasks()
    pipe = microformers.pipeline("kernel-test-alias", model=SumModel(), tokenizer=CharTokenizer())
    assert isinstance(pipe, SumPipeline) and pipe.task == registered_task
    assert pipe("hi")["sum"] == expected_sum("hi")
    reg = registry.get("pipelines", registered_task)
    assert reg.plugin == IN_PROCESS and reg.meta["model_class"] == ()


def test_register_pipeline_records_head_and_default():
    PIPELINE_REGISTRY.register_pipeline(
        "kernel-test-heads",
        SumPipeline,
        pt_model=microformers.AutoModelForMaskedLM,
        default={"pt": ("some/model", "main")},
    )
    try:
        meta = registry.get("pipelines", "kernel-test-heads").meta
        assert meta["model_class"] == ("AutoModelForMaskedLM",)
        assert meta["default_model"] == "some/model"
        assert PIPELINE_REGISTRY.to_dict()["kernel-test-heads"]["default_model"] == "some/model"
    finally:
        registry._entries.pop(("pipelines", "kernel-test-heads"), None)
    with pytest.raises(ConfigError, match="task"):
        PIPELINE_REGISTRY.register_pipeline("", SumPipeline)


def test_unknown_task_lists_installed_ones(registered_task):
    with pytest.raises((UnknownModelTypeError, PluginError)) as info:
        microformers.pipeline("no-such-task")
    message = str(info.value)
    assert "no-such-task" in message and registered_task in message and "my-task" in message


def test_no_task_is_a_clear_error():
    with pytest.raises(ConfigError, match="pass a task"):
        microformers.pipeline(model=SumModel())


def test_no_model_and_no_default_asks_for_model(registered_task):
    with pytest.raises(ConfigError, match="model="):
        microformers.pipeline(registered_task, tokenizer=CharTokenizer())


def test_head_that_does_not_fit_is_refused(toy_model, saved_toy):
    # the toy plugin registers only AutoModelForCausalLM for model_type "toy"
    PIPELINE_REGISTRY.register_pipeline("kernel-test-lm", SumPipeline, pt_model="AutoModelForCausalLM")
    PIPELINE_REGISTRY.register_pipeline("kernel-test-cls", SumPipeline, pt_model="AutoModelForSequenceClassification")
    try:
        pipe = microformers.pipeline("kernel-test-lm", model=toy_model, tokenizer=CharTokenizer())
        assert pipe.model is toy_model
        with pytest.raises(ConfigError, match="AutoModelForSequenceClassification"):
            microformers.pipeline("kernel-test-cls", model=str(saved_toy), tokenizer=CharTokenizer())
    finally:
        registry._entries.pop(("pipelines", "kernel-test-lm"), None)
        registry._entries.pop(("pipelines", "kernel-test-cls"), None)


def test_checkpoint_saved_with_another_head_is_refused(saved_toy):
    import json

    config_path = saved_toy / "config.json"
    config = json.loads(config_path.read_text())
    assert config["architectures"] == ["ToyForCausalLM"]
    from microformers.pipelines import check_checkpoint_head

    microformers.AutoConfig.from_pretrained(saved_toy)  # loads fine
    check_checkpoint_head(microformers.AutoConfig.from_pretrained(saved_toy), "t", ("AutoModelForCausalLM",), "x")
    registry.add("models", ("toy", "AutoModelForMaskedLM"), "microformers_test_toy.modeling_toy:ToyForCausalLM2")
    registry.add("architectures", "ToyForCausalLM2", "x", model_type="toy")
    try:
        with pytest.raises(ConfigError, match="ToyForCausalLM"):
            check_checkpoint_head(
                microformers.AutoConfig.from_pretrained(saved_toy), "fill", ("AutoModelForMaskedLM",), "toy"
            )
    finally:
        registry._entries.pop(("models", ("toy", "AutoModelForMaskedLM")), None)
        registry._entries.pop(("architectures", "ToyForCausalLM2"), None)


# -- a task from a real entry point --------------------------------------------------------------
def test_custom_task_from_a_plugin_entry_point():
    reg = registry.get("pipelines", "my-task")
    assert reg is not None and reg.plugin == "mytask"
    assert registry.plugins["mytask"].distribution == "microformers-test-mytask"
    pipe = microformers.pipeline("my-task")
    assert pipe("banana") == {"text": "banana", "length": 6, "vowels": 3}
    assert pipe(["sky", "queue"], batch_size=2, shout=True) == [
        {"text": "SKY", "length": 3, "vowels": 0},
        {"text": "QUEUE", "length": 5, "vowels": 4},
    ]
    assert type(microformers.pipeline("my-alias")) is type(pipe)
    with pytest.raises(MicroformersError, match="non-empty"):
        pipe("")


def test_in_process_registration_wins_over_the_plugin():
    PIPELINE_REGISTRY.register_pipeline("my-task", SumPipeline)
    try:
        assert registry.get("pipelines", "my-task").plugin == IN_PROCESS
        pipe = microformers.pipeline("my-task", model=SumModel(), tokenizer=CharTokenizer())
        assert isinstance(pipe, SumPipeline)
    finally:
        entries = registry._entries[("pipelines", "my-task")]
        entries[:] = [r for r in entries if r.plugin != IN_PROCESS]
    assert registry.get("pipelines", "my-task").plugin == "mytask"


# From test_pipelines_mutants.py: ``microformers.pipelines`` (the kernel's ``pipeline()`` dispatch) behaviour the
# mutation pass found unasserted (docs/reliability.md). Tasks are registered in a private registry with a pipeline
# class that records what it got.


TOY = "microformers_test_toy.modeling_toy:ToyForCausalLM"


class Recorder:
    needs_model = True
    needs_tokenizer = True

    def __init__(self, model: Any, tokenizer: Any, **kwargs: Any) -> None:
        self.model, self.tokenizer, self.kwargs = model, tokenizer, kwargs


class _Stop(Exception):
    pass


@pytest.fixture
def tasks(isolated_registry: Callable[..., Registry]) -> Registry:
    fresh = isolated_registry(pipelines_module)
    fresh.add("pipelines", "toy-task", Recorder, model_class=("AutoModelForCausalLM",), default_model=None, aliases=())
    fresh.add("pipelines", "two-heads", Recorder, model_class=("AutoModelForA", "AutoModelForB"), default_model=None)
    fresh.add("models", ("toy", "AutoModelForCausalLM"), TOY)
    return fresh


def _tokenizers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []
    monkeypatch.setattr(auto_module.AutoTokenizer, "from_pretrained", lambda name, **kw: asked.append(name) or "tok")
    return asked


def test_an_unknown_task_is_named_in_the_error() -> None:
    with pytest.raises(MicroformersError) as info:
        PIPELINE_REGISTRY.check_task("no-such-task")
    assert str(info.value).startswith("No installed plugin provides pipeline task 'no-such-task'.")


def test_to_dict_lists_each_task_with_its_implementation_and_plugin(tasks: Registry) -> None:
    entry = PIPELINE_REGISTRY.to_dict()["toy-task"]
    assert entry["impl"] is Recorder and entry["plugin"] == IN_PROCESS
    assert entry["model_class"] == ("AutoModelForCausalLM",)


def test_head_names_prefer_an_auto_class_name() -> None:
    class Head:
        auto_name = "AutoModelForMaskedLM"

    assert _head_names(Head) == ("AutoModelForMaskedLM",)
    assert _head_names([Head, "AutoModel"]) == ("AutoModelForMaskedLM", "AutoModel")


@pytest.mark.parametrize("trust", [None, True, False])
def test_trust_remote_code_reaches_the_config_only_when_given(
    tasks: Registry, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trust: bool | None
) -> None:
    seen: list[dict] = []

    def from_pretrained(name: str, **kwargs: Any) -> None:
        seen.append(kwargs)
        raise _Stop

    monkeypatch.setattr(auto_module.AutoConfig, "from_pretrained", from_pretrained)
    with pytest.raises(_Stop):
        pipeline("toy-task", model=str(tmp_path), trust_remote_code=trust)
    assert seen == [{} if trust is None else {"trust_remote_code": trust}]


def test_a_model_object_gives_the_task_its_config_and_tokenizer_source(
    tasks: Registry, toy_model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _tokenizers(monkeypatch)
    toy_model.config.architectures = ["ToyForCausalLM"]
    toy_model.config.name_or_path = "/models/toy"
    toy_model.name_or_path = ""
    built = pipeline(model=toy_model)  # the task comes from the model's config
    assert isinstance(built, Recorder) and built.kwargs["task"] == "toy-task" and built.model is toy_model
    assert asked == ["/models/toy"] and built.tokenizer == "tok"  # the config's name_or_path when the model has none


def test_a_tokenizer_given_as_a_path_is_loaded(
    tasks: Registry, toy_model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _tokenizers(monkeypatch)
    built = pipeline("toy-task", model=toy_model, tokenizer=Path("/tokenizers/t"))
    assert asked == ["/tokenizers/t"] and built.tokenizer == "tok"


def test_a_custom_pipeline_is_looked_up_where_the_model_came_from(
    tasks: Registry, toy_model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources: list[Any] = []

    def custom_class(info: Any, task: str, source: Any, trust: Any, load_kwargs: dict) -> type:
        sources.append(source)
        return Recorder

    monkeypatch.setattr(pipelines_module, "_custom_class", custom_class)
    _tokenizers(monkeypatch)
    toy_model.name_or_path = "/models/custom"
    toy_model.config.custom_pipelines = {"my-task": {"impl": "code.MyPipeline", "pt": "AutoModelForCausalLM"}}
    assert isinstance(pipeline("my-task", model=toy_model), Recorder)
    assert sources == ["/models/custom"]


def test_a_task_without_a_default_model_names_every_head(tasks: Registry) -> None:
    with pytest.raises(ConfigError) as info:
        pipeline("two-heads")
    assert str(info.value) == (
        "task 'two-heads' has no packaged default model. Pass model='<folder, Hub id or alias>' with an "
        "AutoModelForA or AutoModelForB head"
    )


def test_dtype_reaches_the_model_loaded_from_a_folder(
    tasks: Registry, saved_toy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tokenizers(monkeypatch)
    assert pipeline("toy-task", model=saved_toy, dtype=torch.float16).model.dtype == torch.float16
    assert pipeline("toy-task", model=saved_toy).model.dtype == torch.float32


def test_a_model_object_with_another_head_is_refused(tasks: Registry, toy_model: torch.nn.Module) -> None:
    with pytest.raises(ConfigError) as info:
        pipeline("toy-task", model=toy_model.model, tokenizer="unused")  # the base model, no LM head
    assert str(info.value) == (
        "task 'toy-task' needs a model with a AutoModelForCausalLM head (ToyForCausalLM), got ToyModel; "
        "load it with AutoModelForCausalLM.from_pretrained(...)"
    )


# From test_pipelines_full_mutants.py: ``microformers.pipelines`` behaviour the full mutation run
# (docs/reliability.md, every mutant of the module) found unasserted: registration metadata, task lookup, what
# ``pipeline()`` passes to the config, model, tokenizer and pipeline class, default models, custom pipelines, task
# inference and the head checks with their messages. Tasks live in a private registry; model, config and tokenizer
# loading are replaced by recorders, so nothing here reads a checkpoint.


class FakeConfig(PretrainedConfig):
    model_type = "fake"


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
def tasks_with_defaults(isolated_registry: Callable[..., Registry]) -> Registry:
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
def test_register_pipeline_records_every_field(tasks_with_defaults: Registry) -> None:
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
    reg = tasks_with_defaults.get("pipelines", "t1")
    assert reg is not None and reg.ref is Recorder and reg.plugin == IN_PROCESS
    assert reg.meta == {
        "model_class": ("AutoModelForY", "AutoModelForZ"),
        "default_model": "id/one",
        "aliases": ("a1", "a2"),
        "type": "text",
    }
    PIPELINE_REGISTRY.register_pipeline("t2", "pkg.mod:Cls", pt_model=(Head, "AutoModel"))
    reg = tasks_with_defaults.get("pipelines", "t2")
    assert reg is not None and reg.ref == "pkg.mod:Cls"
    assert reg.meta == {
        "model_class": ("AutoModelForZ", "AutoModel"),
        "default_model": None,
        "aliases": (),
        "type": None,
    }


@pytest.mark.parametrize("task", ["", 3, None])
def test_register_pipeline_refuses_a_task_that_is_not_a_name(tasks_with_defaults: Registry, task: Any) -> None:
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


def test_supported_tasks_are_sorted_names_and_aliases_once(tasks_with_defaults: Registry) -> None:
    PIPELINE_REGISTRY.register_pipeline("zeta", Recorder, aliases=("beta", "any"))
    PIPELINE_REGISTRY.register_pipeline("alpha", Recorder, aliases=("beta",))
    expected = ["alpha", "any", "beta", "free", "rec", "two", "zeta"]
    assert PIPELINE_REGISTRY.get_supported_tasks() == expected
    assert supported_tasks() == expected


def test_check_task_resolves_names_and_aliases(tasks_with_defaults: Registry) -> None:
    PIPELINE_REGISTRY.register_pipeline("canon", Modelless, aliases=("other", "rec"))
    name, reg = PIPELINE_REGISTRY.check_task("canon")
    assert name == "canon" and reg is tasks_with_defaults.get("pipelines", "canon")
    name, reg = PIPELINE_REGISTRY.check_task("other")
    assert name == "canon" and reg is tasks_with_defaults.get("pipelines", "canon")
    name, reg = PIPELINE_REGISTRY.check_task("rec")  # a task's own name wins over another task's alias
    assert name == "rec" and reg is tasks_with_defaults.get("pipelines", "rec")
    with pytest.raises(MicroformersError) as info:
        PIPELINE_REGISTRY.check_task("missing")
    assert str(info.value).startswith("No installed plugin provides pipeline task 'missing'.")


def test_to_dict_has_every_task(tasks_with_defaults: Registry) -> None:
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
    tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch
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
    tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = Loads(monkeypatch)
    built = pipeline("rec", model=Path("/m"), device="cpu", batch_size=4, dtype=torch.float16)
    assert loads.models[0][1] == "/m" and loads.models[0][2]["dtype"] == torch.float16
    assert built.kwargs == {"task": "rec", "device": "cpu", "dtype": None, "batch_size": 4}  # the model has it
    given = FakeHead("AutoModelForA", "x", {})
    built = pipeline("rec", model=given, tokenizer="tok", dtype=torch.float16)
    assert built.model is given and built.kwargs["dtype"] == torch.float16  # the pipeline casts a given model


def test_torch_dtype_is_the_older_name_of_dtype(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    pipeline("rec", model="m", torch_dtype=torch.bfloat16)
    pipeline("rec", model="m", torch_dtype=torch.bfloat16, dtype=torch.bfloat16)
    assert [kwargs["dtype"] for _, _, kwargs in loads.models] == [torch.bfloat16, torch.bfloat16]
    with pytest.raises(ConfigError) as info:
        pipeline("rec", model="m", dtype=torch.float16, torch_dtype=torch.bfloat16)
    assert str(info.value) == (
        "pipeline(): pass dtype= or torch_dtype= (the same thing), not both (torch.float16, torch.bfloat16)"
    )


def test_device_map_is_a_loading_argument(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_model_kwargs_reach_the_model_only(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    built = pipeline("rec", model="m", model_kwargs={"low_cpu_mem_usage": True})
    assert loads.models[0][2] == {"config": loads.config, "low_cpu_mem_usage": True}
    assert loads.configs == [("m", {})] and loads.tokenizers == [("m", {})]
    assert "low_cpu_mem_usage" not in built.kwargs


def test_config_given_as_a_name_or_object(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    pipeline("rec", model="m", config="config/source", revision="v2")
    assert loads.configs == [("config/source", {"revision": "v2"})]
    given = FakeConfig(hidden_size=7)
    pipeline("rec", model="m", config=given)
    assert len(loads.configs) == 1 and loads.models[-1][2]["config"] is given
    pipeline("rec", model=Path("/folder"))
    assert loads.configs[-1] == ("/folder", {})


def test_the_default_model_and_its_tokenizer(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads(monkeypatch)
    built = pipeline("rec", revision="r")
    assert loads.configs == [("default/model", {"revision": "r"})]  # no config yet: loaded for the default
    assert loads.models == [("AutoModelForA", "default/model", {"revision": "r", "config": loads.config})]
    assert built.model.loaded_from == "default/model" and built.tokenizer == "tokenizer of default/model"


def test_a_task_that_needs_no_model_or_tokenizer(
    tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = Loads(monkeypatch)
    built = pipeline("free")
    assert built.model is None and built.tokenizer is None and isinstance(built, Modelless)
    assert loads.configs == loads.models == loads.tokenizers == []
    built = pipeline("free", model="m")
    assert built.tokenizer is None and loads.tokenizers == []
    built = pipeline("free", model=FakeHead("AutoModel", "named", {}))
    assert built.tokenizer is None


def test_a_task_without_a_default_model_names_its_head(tasks_with_defaults: Registry) -> None:
    with pytest.raises(ConfigError) as info:
        pipeline("any")
    assert str(info.value) == (
        "task 'any' has no packaged default model. Pass model='<folder, Hub id or alias>' with an AutoModel head"
    )


def test_pipeline_class_overrides_the_registered_one(
    tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    Loads(monkeypatch)
    built = pipeline("rec", model="m", pipeline_class=Modelless)
    assert type(built) is Modelless and built.tokenizer is None and built.kwargs["task"] == "rec"


def test_an_alias_builds_the_canonical_task(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_a_model_object_brings_its_tokenizer(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_a_custom_pipeline_in_the_config(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_a_custom_pipeline_without_a_model_folder(
    tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No folder to load the code from: a clear error (was an UnboundLocalError, or a Hub lookup of 'None')."""
    config = FakeConfig(custom_pipelines={"mine": {"impl": "code.Mine"}})
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(remote_module, "load_remote_class", lambda *args: calls.append(args) or Recorder)
    for model in (None, OtherHead()):
        with pytest.raises(ConfigError) as info:
            pipeline("mine", model=model, config=config, trust_remote_code=True)
        assert "custom_pipelines['mine']" in str(info.value) and "model='<folder or Hub id>'" in str(info.value)
    assert calls == []
    with pytest.raises(ConfigError, match="task 'mine' has no packaged default model"):  # a given class: no code to load
        pipeline("mine", config=config, pipeline_class=Recorder)
    assert type(pipeline("mine", config=config, pipeline_class=Modelless)) is Modelless


# -- task inference -----------------------------------------------------------------------------------
def test_a_model_object_without_a_config_needs_a_task(tasks_with_defaults: Registry) -> None:
    with pytest.raises(ConfigError) as info:
        pipeline(model=OtherHead())
    assert str(info.value) == (
        "pipeline(): pass a task, e.g. pipeline('text-generation', model=...); OtherHead has no config to infer one from"
    )


def test_one_custom_pipeline_names_the_task(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    config = FakeConfig(custom_pipelines={"rec": {"impl": "code.Mine"}})
    Loads(monkeypatch, config)
    monkeypatch.setattr(remote_module, "load_remote_class", lambda *args: Recorder)
    assert pipeline(model="folder").kwargs["task"] == "rec"


def test_the_saved_head_names_the_task(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks_with_defaults.add("models", ("fake", "AutoModelForA"), "pkg.modeling:FakeForA")
    tasks_with_defaults.add("models", ("fake", "AutoModelForB"), "pkg.modeling:FakeForB")
    tasks_with_defaults.add("models", ("other", "AutoModelForC"), "pkg.modeling:FakeForA")
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
    tasks_with_defaults: Registry, isolated_registry: Callable[..., Registry]
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
def test_the_first_head_that_loads_wins(tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
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
def heads(tasks_with_defaults: Registry) -> Registry:
    tasks_with_defaults.add("models", ("fake", "AutoModelForA"), FakeHead)
    tasks_with_defaults.add("models", ("fake", "AutoModelForB"), OtherHead)
    tasks_with_defaults.add("architectures", "FakeHead", FakeHead, model_type="fake")
    tasks_with_defaults.add("architectures", "OtherHead", OtherHead, model_type="fake")
    return tasks_with_defaults


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


def test_check_model_head_names_the_registered_heads_and_the_fix(heads: Registry) -> None:
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


def test_a_custom_pipeline_for_a_model_object_without_a_name(
    tasks_with_defaults: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
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

"""``microformers.pipelines`` (the kernel's ``pipeline()`` dispatch) behaviour the mutation pass found unasserted
(docs/reliability.md). Tasks are registered in a private registry with a pipeline class that records what it got."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import ConfigError, MicroformersError
from microformers import auto as auto_module
from microformers import pipelines as pipelines_module
from microformers.pipelines import PIPELINE_REGISTRY, _head_names, pipeline
from microformers.plugins import IN_PROCESS, Registry

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


def test_a_tokenizer_given_as_a_path_is_loaded(tasks: Registry, toy_model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
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
        "task 'two-heads' has no default model: pass model='<folder, Hub id or alias>' "
        "(a checkpoint with a AutoModelForA or AutoModelForB head)"
    )


def test_dtype_reaches_the_model_loaded_from_a_folder(tasks: Registry, saved_toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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

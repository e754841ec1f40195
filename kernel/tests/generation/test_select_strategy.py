"""The kernel's whole part of generate(): merge the settings, select a strategy, call it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import GenerationConfig, GenerationError, registry
from microformers.generation import GenerationMixin, select_strategy
from microformers.generation import mixin as mixin_module
from microformers.plugins import Registry


class Marker:
    def __init__(self, name: str, key: str) -> None:
        self.name, self.key = name, key
        self.calls: list[dict] = []

    def applies(self, config: GenerationConfig) -> bool:
        return bool(getattr(config, self.key, False))

    def __call__(self, model, inputs, **kwargs):
        self.calls.append({"inputs": inputs, **kwargs})
        return self.name


@pytest.fixture(scope="module")
def markers():
    low, high = Marker("low", "kernel_select_both"), Marker("high", "kernel_select_both")
    only_low = Marker("only-low", "kernel_select_only_low")
    registry.add("generation_strategies", "kernel-select-low", low, priority=1)
    registry.add("generation_strategies", "kernel-select-high", high, priority=50)
    registry.add("generation_strategies", "kernel-select-only-low", only_low, priority=5)
    return low, high, only_low


def test_highest_priority_strategy_that_applies(markers):
    low, high, only_low = markers
    assert select_strategy(GenerationConfig(kernel_select_both=True)) is high
    assert select_strategy(GenerationConfig(kernel_select_only_low=True)) is only_low
    assert select_strategy(GenerationConfig(kernel_select_both=True, strategy="kernel-select-low")) is low
    assert select_strategy(GenerationConfig(), custom_generate="kernel-select-low") is low


def test_generate_passes_the_merged_config_and_the_raw_call(markers, tiny_model):
    _, high, _ = markers
    tiny_model.generation_config = GenerationConfig(kernel_select_both=True, top_k=3)
    assert tiny_model.generate("raw", max_new_tokens=4, attention_mask="m", tokenizer="t") == "high"
    call = high.calls[-1]
    assert call["inputs"] == "raw"
    assert call["generation_config"].max_new_tokens == 4 and call["generation_config"].top_k == 3
    assert call["model_kwargs"] == {"attention_mask": "m", "tokenizer": "t"}
    assert tiny_model.generation_config.max_new_tokens is None  # the call does not change the model's config


def test_invalid_settings_are_refused_before_any_strategy(markers, tiny_model):
    with pytest.raises(GenerationError, match="top_p"):
        tiny_model.generate(kernel_select_both=True, top_p=2.0)


def test_no_applicable_strategy_names_the_plugin(monkeypatch):
    monkeypatch.setattr(registry, "all", lambda kind: [])
    with pytest.raises(GenerationError, match="pip install microformers-generation"):
        select_strategy(GenerationConfig())


# From test_mixin_mutants.py: ``microformers.generation.mixin`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


@pytest.mark.parametrize(
    ("name", "expected"),
    [("ToyForCausalLM", True), ("GPT2LMHeadModel", True), ("T5ForConditionalGeneration", True), ("BertModel", False)],
)
def test_can_generate_from_the_class_name(name: str, expected: bool) -> None:
    assert type(name, (GenerationMixin,), {}).can_generate() is expected


def test_generation_config_json_is_read_from_the_subfolder(toy_model: torch.nn.Module, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "generation_config.json").write_text(json.dumps({"max_new_tokens": 7}))
    toy_model._load_generation_config(tmp_path, {"subfolder": "sub"})
    assert toy_model.generation_config.max_new_tokens == 7


def test_without_generation_config_json_the_settings_are_taken_from_the_config_at_load(
    toy_model: torch.nn.Module, tmp_path: Path
) -> None:
    toy_model.config.eos_token_id = 5
    toy_model._load_generation_config(tmp_path, {})
    toy_model.config.eos_token_id = 9  # a later config edit does not change the loaded generation settings
    assert toy_model.generation_config.eos_token_id == 5


def test_a_model_that_cannot_generate_saves_generation_settings_only_when_set(
    toy_model: torch.nn.Module, tmp_path: Path
) -> None:
    base = toy_model.model  # ToyModel: no LM head
    assert not base.can_generate()
    base._save_generation_config(tmp_path / "a")
    assert not (tmp_path / "a" / "generation_config.json").exists()
    base.generation_config = GenerationConfig(max_new_tokens=3)
    base._save_generation_config(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "generation_config.json").read_text())["max_new_tokens"] == 3


def test_no_static_cache_is_a_clear_error(toy_model: torch.nn.Module) -> None:
    with pytest.raises(
        GenerationError, match=r"^ToyForCausalLM offers no static cache; drop cache_implementation='static'$"
    ):
        toy_model.make_static_cache(8)


def test_compute_transition_scores_hands_every_argument_on(
    toy_model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple] = []
    name = "GenerationMixin.compute_transition_scores"

    def compute_transition_scores(*args: Any) -> Any:
        return calls.append((name, toy_model, *args)) or "scores"

    monkeypatch.setattr(mixin_module, "compute_transition_scores", compute_transition_scores)
    sequences, scores, beams = torch.zeros(1, 2), (torch.zeros(1, 4),), torch.zeros(1, 1)
    assert toy_model.compute_transition_scores(sequences, scores, beams) == "scores"
    assert toy_model.compute_transition_scores(sequences, scores, normalize_logits=True) == "scores"
    assert calls == [
        ("GenerationMixin.compute_transition_scores", toy_model, sequences, scores, beams, False),
        ("GenerationMixin.compute_transition_scores", toy_model, sequences, scores, None, True),
    ]


def test_a_generation_config_of_another_type_is_refused(toy_model: torch.nn.Module) -> None:
    with pytest.raises(GenerationError, match=r"^generation_config must be a GenerationConfig, got dict$"):
        toy_model.generate(torch.tensor([[1, 2]]), generation_config={"max_new_tokens": 2})


class _Never:
    def applies(self, config: GenerationConfig) -> bool:
        return False


def test_strategy_errors_name_what_is_missing(isolated_registry: Callable[..., Registry]) -> None:
    fresh = isolated_registry(mixin_module)
    with pytest.raises(GenerationError, match=r"\(installed: none\)\. The standard ones"):
        mixin_module.select_strategy(GenerationConfig())
    with pytest.raises(Exception, match=r"^No installed plugin provides generation strategy 'custom_generate'\."):
        mixin_module.select_strategy(GenerationConfig(), custom_generate=lambda *a, **k: None)
    fresh.add("generation_strategies", "never", _Never())
    with pytest.raises(GenerationError) as info:
        mixin_module.select_strategy(GenerationConfig())
    assert str(info.value).startswith("no installed generation strategy applies to these settings (installed: never).")


# -- third pass (full run of the module) ---------------------------------------------------------------------------


def test_generation_config_json_is_read_from_the_folder_itself(toy_model: torch.nn.Module, tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"max_new_tokens": 7}))
    toy_model._load_generation_config(tmp_path, {})
    assert toy_model.generation_config.max_new_tokens == 7


def test_per_call_settings_never_change_the_model_s_generation_config(toy_model: torch.nn.Module) -> None:
    toy_model.generation_config = GenerationConfig(max_new_tokens=2, my_option=1)
    config, rest = toy_model._merge_generation_config(None, {"my_option": 2, "other": 3})
    assert config.my_option == 2 and rest == {"other": 3}
    assert toy_model.generation_config.my_option == 1


def test_no_compiled_decode_step_is_a_clear_error(toy_model: torch.nn.Module) -> None:
    with pytest.raises(GenerationError, match=r"^ToyForCausalLM has no compiled decode step; drop compile_config$"):
        toy_model.compile_decode_step(mode="default")


def test_an_unknown_configured_strategy_is_named_as_a_generation_strategy(
    isolated_registry: Callable[..., Registry],
) -> None:
    isolated_registry(mixin_module)
    with pytest.raises(Exception, match=r"^No installed plugin provides generation strategy 'nope'\."):
        mixin_module.select_strategy(GenerationConfig(strategy="nope"))


class _Always:
    def applies(self, config: GenerationConfig) -> bool:
        return True

    def __call__(self, *args: object, **kwargs: object) -> None:  # a strategy is callable (or refused when chosen)
        return None


def test_strategies_are_tried_by_priority_and_ones_without_applies_are_skipped(
    isolated_registry: Callable[..., Registry],
) -> None:
    fresh = isolated_registry(mixin_module)
    unranked, ranked = _Always(), _Always()
    fresh.add("generation_strategies", "a_unranked", unranked)  # names are listed sorted: it comes first
    fresh.add("generation_strategies", "z_ranked", ranked, priority=1)
    assert mixin_module.select_strategy(GenerationConfig()) is ranked
    other = isolated_registry(mixin_module)
    other.add("generation_strategies", "plain", lambda *args: None)  # no applies(): never chosen by settings
    other.add("generation_strategies", "never", _Never())
    with pytest.raises(GenerationError, match=r"\(installed: never, plain\)\."):
        mixin_module.select_strategy(GenerationConfig())


class ClassStrategy:
    """A strategy registered as its class (the ``"module:Name"`` convention used for everything else)."""

    def applies(self, config: GenerationConfig) -> bool:
        return bool(getattr(config, "kernel_select_class", False))

    def __call__(self, model, inputs, **kwargs):
        return "from-class"


class NeedsArguments(ClassStrategy):
    def __init__(self, required: int) -> None:
        self.required = required


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    """A registry of this test's own (nothing registered here reaches other tests)."""
    fresh = Registry()
    fresh._discovered = True
    monkeypatch.setattr(mixin_module, "registry", fresh)
    return fresh


def test_a_strategy_registered_as_a_class_is_made_once_and_used(own_registry: Registry):
    own_registry.add("generation_strategies", "kernel-select-class", ClassStrategy, priority=60)
    chosen = select_strategy(GenerationConfig(kernel_select_class=True))
    assert isinstance(chosen, ClassStrategy)
    assert select_strategy(GenerationConfig(), custom_generate="kernel-select-class") is chosen
    assert chosen(None, None) == "from-class"


def test_a_strategy_class_that_needs_arguments_is_refused_by_name(own_registry: Registry):
    own_registry.add("generation_strategies", "kernel-select-needs-args", NeedsArguments, priority=0)
    with pytest.raises(GenerationError, match="kernel-select-needs-args.*NeedsArguments.*register an instance"):
        select_strategy(GenerationConfig(), custom_generate="kernel-select-needs-args")


class NoCall:
    """Registered as a strategy but without ``__call__``: generate() could not call it."""

    def applies(self, config: GenerationConfig) -> bool:
        return True


@pytest.mark.parametrize("registered", [NoCall, NoCall()], ids=["class", "instance"])
def test_a_strategy_without_call_is_refused_by_name_when_selected_not_a_raw_type_error(
    own_registry: Registry, registered: object
):
    own_registry.add("generation_strategies", "kernel-select-no-call", registered, priority=0)
    for select in (
        lambda: select_strategy(GenerationConfig(), custom_generate="kernel-select-no-call"),
        lambda: select_strategy(GenerationConfig()),  # chosen through applies()
    ):
        with pytest.raises(GenerationError, match=r"'kernel-select-no-call' is a NoCall object, which has no __call__"):
            select()

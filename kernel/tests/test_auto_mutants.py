"""Behaviour of ``microformers.auto`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from microformers import (
    AutoConfig,
    AutoFeatureExtractor,
    AutoModelForCausalLM,
    AutoProcessor,
    AutoTokenizer,
    ConfigError,
    MicroformersError,
    PretrainedConfig,
)
from microformers import auto as auto_module
from microformers.plugins import Registry
from microformers.weights import Checkpoint


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


class _Loaded:
    @classmethod
    def from_pretrained(cls, pretrained: object, **kwargs: object) -> tuple:
        return cls.__name__, Path(pretrained), kwargs

    @classmethod
    def from_files(cls, files: dict, *inputs: object, **kwargs: object) -> tuple:
        return cls.__name__, files


class FeatureRec(_Loaded):
    pass


class ProcessorRec(_Loaded):
    pass


class TokenizerMine(_Loaded):
    pass


class TokenizerOther(_Loaded):
    pass


@pytest.fixture
def fresh_registry(isolated_registry: Callable[..., Registry]) -> Registry:
    fresh = isolated_registry(auto_module)
    fresh.add("processors", "FeatureRec", FeatureRec, role="feature_extractor", model_types=("proc_toy",))
    fresh.add("processors", "ProcessorRec", ProcessorRec, role="processor", model_types=("proc_toy",))
    fresh.add("tokenizers", "other", TokenizerOther, tokenizer_classes=("OtherTokenizer",), priority=5)
    fresh.add("tokenizers", "mine", TokenizerMine, tokenizer_classes=("MyTokenizer",), priority=0)
    return fresh


def _write(folder: Path, **files: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    return folder


def test_a_tokenizer_carried_by_the_weights_file_picks_the_backend_its_config_names(
    saved_toy: Path, fresh_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"tokenizer_config.json": {"tokenizer_class": "MyTokenizer"}, "tokenizer.json": {"model": {}}}
    monkeypatch.setattr(Checkpoint, "carried", lambda self, what: files if what == "tokenizer_files" else None)
    assert AutoTokenizer.from_pretrained(saved_toy) == ("TokenizerMine", files)  # not the higher-priority one


def test_auto_feature_extractor_by_type_or_by_model_type(tmp_path: Path, fresh_registry: Registry) -> None:
    by_type = _write(tmp_path / "a", preprocessor_config={"feature_extractor_type": "FeatureRec"})
    assert AutoFeatureExtractor.from_pretrained(by_type, sampling_rate=8) == ("FeatureRec", by_type, {"sampling_rate": 8})
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

"""Quantization on load: which quantizer ``from_pretrained`` picks (arguments, ``load_in_*`` flags, saved
configs) and what it asks of it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from modeling_stand_ins import _Small

from microformers import AutoModelForCausalLM, ConfigError, PretrainedConfig
from microformers import modeling as modeling_module
from microformers.plugins import Registry

# From test_modeling_full_mutants.py: Behaviour of ``microformers.modeling`` that the full mutation run (workspace
# hmod) found unasserted. See docs/reliability.md, "Mutation testing": each test here fails with at least one mutant
# of ``kernel/src/microformers/modeling.py`` that the other judging tests let survive, and passes on the real code.


# -- quantizer choice ------------------------------------------------------------------------------------------


class _StandInQuantizer:
    description = "a stand-in"

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.quant_method = spec["quant_method"]

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec, "checked": True}


class _SpecObject:
    """A quantization config object (as ``BitsAndBytesConfig`` is): not a mapping, has ``to_dict()``."""

    def to_dict(self) -> dict[str, Any]:
        return {"quant_method": "int4", "group_size": 32}


@pytest.fixture
def quantizers(isolated_registry: Callable[..., Registry]) -> Registry:
    fresh = isolated_registry(modeling_module)
    fresh.add("quantizers", "int8", _StandInQuantizer)
    fresh.add("quantizers", "int4", _StandInQuantizer)
    return fresh


def test_no_quantization_asked_means_no_quantizer(quantizers: Registry) -> None:
    config = PretrainedConfig()
    assert modeling_module._quantizer(config) is None
    assert modeling_module._quantizer(config, None, False, False) is None
    assert getattr(config, "quantization_config", None) is None


def test_load_in_flags_pick_their_quantizer_and_say_so(quantizers: Registry, caplog: pytest.LogCaptureFixture) -> None:
    for flag, method in (("load_in_4bit", "int4"), ("load_in_8bit", "int8")):
        config = PretrainedConfig()
        caplog.clear()
        with caplog.at_level("WARNING", logger="microformers"):
            quantizer = modeling_module._quantizer(config, **{flag: True})
        assert quantizer.spec == {"quant_method": method}
        assert config.quantization_config == {"quant_method": method, "checked": True}
        assert [r.getMessage() for r in caplog.records] == [f"{flag}=True: quantizing with '{method}' (a stand-in)"]
    with pytest.raises(ConfigError, match=r"^pass one of quantization_config, load_in_8bit=True or load_in_4bit=True$"):
        modeling_module._quantizer(PretrainedConfig(), {"quant_method": "int8"}, load_in_4bit=True)


def test_a_quantization_config_from_the_argument_or_the_config_file(
    quantizers: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    config = PretrainedConfig()
    with caplog.at_level("WARNING", logger="microformers"):
        quantizer = modeling_module._quantizer(config, _SpecObject())
    assert quantizer.spec == {"quant_method": "int4", "group_size": 32} and not caplog.records  # no flag: no warning
    assert config.quantization_config == {"quant_method": "int4", "group_size": 32, "checked": True}
    saved = PretrainedConfig(quantization_config={"quant_method": "int8", "bits": 8})
    assert modeling_module._quantizer(saved).spec == {"quant_method": "int8", "bits": 8}
    assert modeling_module._quantizer(saved, {"quant_method": "int4"}).spec == {"quant_method": "int4"}  # argument wins


def test_a_quantization_config_without_a_known_method_is_refused(quantizers: Registry) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^the quantization_config argument \{'bits': 4\} has no 'quant_method' \(e\.g\. 'int8', 'int4', 'gguf'\)$",
    ):
        modeling_module._quantizer(PretrainedConfig(), {"bits": 4})
    with pytest.raises(Exception, match=r"^No installed plugin provides quantization method 'int3'\. "):
        modeling_module._quantizer(PretrainedConfig(), {"quant_method": "int3"})


# From test_modeling_mutants.py: Behaviour of ``microformers.modeling`` that the mutation pass found unasserted
# (docs/reliability.md).


class _Quantizer:
    quant_method = "int8"
    description = "a stand-in"

    def __init__(self, spec: dict) -> None:
        self.spec = spec

    def to_dict(self) -> dict:
        return dict(self.spec)


def test_load_in_8bit_alone_picks_the_int8_quantizer_and_both_flags_are_refused(
    isolated_registry: Callable[..., Registry],
) -> None:
    fresh = isolated_registry(modeling_module)
    fresh.add("quantizers", "int8", _Quantizer)
    config = PretrainedConfig()
    quantizer = modeling_module._quantizer(config, load_in_8bit=True)
    assert isinstance(quantizer, _Quantizer) and config.quantization_config == {"quant_method": "int8"}
    with pytest.raises(ConfigError, match=r"^pass one of quantization_config, load_in_8bit=True or load_in_4bit=True$"):
        modeling_module._quantizer(PretrainedConfig(), load_in_8bit=True, load_in_4bit=True)


class _RecordingQuantizer:
    quant_method = "recording"
    description = "records what it is handed"
    prepared: list = []

    def __init__(self, spec: dict) -> None:
        self.spec = spec

    def to_dict(self) -> dict:
        return dict(self.spec)

    def prepare(self, model: torch.nn.Module, fmt: object, files: list, dtype: torch.dtype) -> object:
        _RecordingQuantizer.prepared.append(model)
        return fmt.load(files, dtype=dtype)

    def finish(self, model: torch.nn.Module) -> None:
        _RecordingQuantizer.prepared.append(("finish", model))


def test_a_quantizer_prepares_the_model_being_loaded(
    saved_toy: Path, monkeypatch: pytest.MonkeyPatch, isolated_registry: Callable[..., Registry]
) -> None:
    fresh = isolated_registry(modeling_module)
    fresh.add("quantizers", "recording", _RecordingQuantizer)
    monkeypatch.setattr(_RecordingQuantizer, "prepared", [])
    model = AutoModelForCausalLM.from_pretrained(saved_toy, quantization_config={"quant_method": "recording"})
    assert _RecordingQuantizer.prepared == [model, ("finish", model)]
    assert model.config.quantization_config == {"quant_method": "recording"}


# From test_modeling_rest_mutants.py: Behaviour of ``microformers.modeling`` that the seventh mutation pass
# (workspace jmod) found unasserted. See docs/reliability.md, "Mutation testing": each test here fails with at least
# one mutant of ``kernel/src/microformers/modeling.py`` (``from_pretrained``, construction on meta, ``post_init``)
# that the other judging tests let survive, and passes on the real code.


@pytest.fixture
def small_folder(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    folder = tmp_path / "small"
    _Small(PretrainedConfig(flavour="saved")).save_pretrained(folder)
    return folder


# -- quantizers: the argument, the flags, prepare and finish ----------------------------------------------------


class _DoublingQuantizer:
    description = "records its calls"
    calls: list[tuple[Any, ...]] = []

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.quant_method = spec["quant_method"]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.spec)

    def prepare(self, model: Any, fmt: Any, files: list[Path], dtype: torch.dtype) -> Any:
        self.calls.append(("prepare", model, [f.name for f in files], dtype))
        return {k: v * 2 for k, v in fmt.load(files, dtype=dtype).items()}

    def finish(self, model: Any) -> None:
        self.calls.append(("finish", model))


@pytest.fixture
def recording(isolated_registry: Callable[..., Registry]) -> type[_DoublingQuantizer]:
    fresh = isolated_registry(modeling_module)
    for name in ("rec", "int8", "int4"):
        fresh.add("quantizers", name, _DoublingQuantizer)
    _DoublingQuantizer.calls = []
    return _DoublingQuantizer


@pytest.mark.parametrize(
    "kwargs, method",
    [({"quantization_config": {"quant_method": "rec"}}, "rec"), ({"load_in_8bit": True}, "int8"),
     ({"load_in_4bit": True}, "int4")],
)  # fmt: skip
def test_a_quantizer_asked_for_prepares_the_weights_and_finishes_the_model(
    small_folder: Path, recording: type[_DoublingQuantizer], kwargs: dict[str, Any], method: str
) -> None:
    plain = _Small.from_pretrained(small_folder)
    model = _Small.from_pretrained(small_folder, config=PretrainedConfig(), dtype=torch.float64, **kwargs)
    assert [c[0] for c in recording.calls] == ["prepare", "finish"]
    (_, prepared, names, dtype), (_, finished) = recording.calls
    assert prepared is model and finished is model and names == ["model.safetensors"] and dtype == torch.float64
    assert model.config.quantization_config == {"quant_method": method}
    torch.testing.assert_close(model.inner.weight, plain.inner.weight.double() * 2)


def test_a_quantization_config_saved_with_the_model_is_used(
    small_folder: Path, recording: type[_DoublingQuantizer]
) -> None:
    config = json.loads((small_folder / "config.json").read_text())
    (small_folder / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "rec"}}))
    model = _Small.from_pretrained(small_folder)
    assert [c[0] for c in recording.calls] == ["prepare", "finish"] and recording.calls[1][1] is model

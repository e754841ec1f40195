"""``microformers_sdk.quantization``: quantization configs, the modules left unconverted, and save/reload."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from microformers import CheckpointError, ConfigError
from microformers_sdk.quantization import Quantizer

# From test_quantization_full_mutants.py: ``microformers_sdk.quantization``: behaviour the fourth (full) mutation
# run found unasserted (docs/reliability.md, "Fourth pass").


class _Packed(nn.Module):
    def __init__(self, rows: int, columns: int) -> None:
        super().__init__()
        self.register_buffer("q", torch.empty(rows, columns, device="meta"))
        self.register_buffer("scale", torch.empty(rows, 1, device="meta"))

    def quantize_weight(self, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"q": weight.sign(), "scale": weight.abs().mean(1, keepdim=True)}


class _Mine(Quantizer):
    quant_method = "mine"

    def quantized_linear(self, name: str, module: nn.Linear) -> nn.Module | None:
        return _Packed(module.out_features, module.in_features)


class _Format:
    def __init__(self, source: dict) -> None:
        self.source = source

    def load(self, files: list, dtype: torch.dtype | None = None) -> dict:
        return self.source


@pytest.mark.parametrize("skip", [["lm_head", 3], "lm_head"])
def test_modules_to_not_convert_must_be_a_list_of_names(skip: object) -> None:
    with pytest.raises(ConfigError) as info:
        _Mine({"modules_to_not_convert": skip})
    assert str(info.value) == f"quantization_config.modules_to_not_convert must be a list of names, got {skip!r}"


def test_a_model_without_a_base_prefix_converts_its_own_weights() -> None:
    model = nn.Module()
    model.proj = nn.Linear(3, 2, bias=False)
    weight = torch.tensor([[1.0, -2.0, 3.0], [-1.0, 1.0, -1.0]])
    view = _Mine({}).prepare(model, _Format({"proj.weight": weight}), ["f"], torch.float32)
    # exact: sign() of the same values: -1, 0 or 1
    assert sorted(view) == ["proj.q", "proj.scale"] and torch.equal(view["proj.q"], weight.sign())


def test_a_base_model_loads_the_head_models_checkpoint_with_its_prefix() -> None:
    class Base(nn.Module):
        base_model_prefix = "model"

        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(3, 2, bias=False)

    weight = torch.tensor([[1.0, -2.0, 3.0], [-1.0, 1.0, -1.0]])
    view = _Mine({}).prepare(Base(), _Format({"model.proj.weight": weight}), ["f"], torch.float32)
    assert sorted(view) == ["model.proj.q", "model.proj.scale"]
    # exact: sign() of the same values: -1, 0 or 1
    assert torch.equal(view["model.proj.q"], weight.sign())


def test_modules_under_a_skipped_block_keep_their_float_weights() -> None:
    model = nn.Module()
    model.block = nn.Module()
    model.block.proj = nn.Linear(3, 2)
    model.other = nn.Linear(3, 2)
    quantizer = _Mine({"modules_to_not_convert": ["block"]})
    quantizer.replace_modules(model)
    assert isinstance(model.block.proj, nn.Linear) and isinstance(model.other, _Packed)


def test_a_nested_tied_linear_is_not_quantized() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = nn.Module()
            self.model.head = nn.Linear(3, 2, bias=False)
            self.model.proj = nn.Linear(3, 2, bias=False)

        def tied_parameter_names(self) -> set[str]:
            return {"model.head.weight"}

    model = Tied()
    _Mine({}).replace_modules(model)
    assert isinstance(model.model.head, nn.Linear) and isinstance(model.model.proj, _Packed)


# From test_quantization_mutants.py: ``microformers_sdk.quantization`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


class _Outer(nn.Module):
    base_model_prefix = "model"

    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.proj = nn.Linear(3, 2, bias=False)


class _Source(dict):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reads: list[str] = []

    def __getitem__(self, key: str) -> torch.Tensor:
        self.reads.append(key)
        return super().__getitem__(key)

    def file_of(self, key: str) -> str:
        return f"file of {key}"


class _DtypeRecordingFormat:
    def __init__(self, source: dict) -> None:
        self.source, self.dtypes = source, []

    def load(self, files: list, dtype: torch.dtype | None = None) -> dict:
        self.dtypes.append(dtype)
        return self.source


def test_to_dict_names_the_quantizers_own_method() -> None:
    assert _Mine({"quant_method": "other", "bits": 4}).to_dict() == {"quant_method": "mine", "bits": 4}


def test_prepare_converts_checkpoint_weights_named_without_the_base_prefix() -> None:
    weight = torch.tensor([[1.0, -2.0, 3.0], [-1.0, 1.0, -1.0]])
    source = _Source({"proj.weight": weight, "other.bias": torch.ones(1)})
    fmt, quantizer = _DtypeRecordingFormat(source), _Mine({"quant_method": "mine"})
    view = quantizer.prepare(_Outer(), fmt, ["f"], torch.float16)
    assert fmt.dtypes == [torch.float16]
    assert "proj.q" in view and "other.bias" in view
    assert "proj.weight" not in view and "nope" not in view  # replaced by its quantized tensors; unknown
    # exact: sign() of the same values: -1, 0 or 1
    assert torch.equal(view["proj.q"], weight.sign()) and view["proj.scale"].shape == (2, 1)
    assert source.reads == ["proj.weight"] and view._pending == {}  # read once, released after the last part
    assert view.file_of("proj.q") == "file of proj.weight" and view.file_of("other.bias") == "file of other.bias"
    plain = quantizer.prepare(_Outer(), _DtypeRecordingFormat({"proj.weight": weight}), ["f"], torch.float32)
    assert plain.file_of("proj.q") is None  # a source that cannot say


def test_finish_names_a_quantized_tensor_the_checkpoint_lacked() -> None:
    quantizer = _Mine({"quant_method": "mine"})
    quantizer.converted["model.proj"] = _Packed(2, 3)
    with pytest.raises(CheckpointError) as info:
        quantizer.finish(_Outer())
    assert str(info.value) == (
        "quantized checkpoint is missing tensor 'model.proj.q' (quant_method 'mine'); the folder is incomplete — "
        "save it again with save_pretrained"
    )

"""Behaviour of ``microformers.modeling`` that the seventh mutation pass (workspace jmod) found unasserted.

See docs/reliability.md, "Mutation testing": each test here fails with at least one mutant of
``kernel/src/microformers/modeling.py`` (``from_pretrained``, construction on meta, ``post_init``) that the other
judging tests let survive, and passes on the real code.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import ConfigError, PretrainedConfig
from microformers import modeling as modeling_module
from microformers.plugins import Registry


class _Small(modeling_module.PreTrainedModel):
    """A linear layer and a frozen parameter made from values."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.inner = torch.nn.Linear(3, 3)
        self.fixed = torch.nn.Parameter(torch.arange(3.0), requires_grad=False)
        self.post_init()


@pytest.fixture
def small_folder(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    folder = tmp_path / "small"
    _Small(PretrainedConfig(flavour="saved")).save_pretrained(folder)
    return folder


def _message(exc: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc.value)


# -- arguments from_pretrained takes, ignores or refuses ------------------------------------------------------


def test_trust_remote_code_and_low_cpu_mem_usage_are_accepted_and_reach_no_config(small_folder: Path) -> None:
    model = _Small.from_pretrained(
        small_folder, config=PretrainedConfig(), trust_remote_code=True, low_cpu_mem_usage=True
    )
    assert isinstance(model, _Small)
    loaded = _Small.from_pretrained(small_folder, trust_remote_code=True, low_cpu_mem_usage=True)
    assert loaded.config.flavour == "saved"
    assert not hasattr(loaded.config, "trust_remote_code") and not hasattr(loaded.config, "low_cpu_mem_usage")


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"offload_folder": "off"}, "offload_folder"),
        ({"offload_state_dict": True}, "offload_state_dict"),
        ({"offload_buffers": True}, "offload_buffers"),
        ({"offload_folder": "off", "offload_buffers": True}, "offload_folder, offload_buffers"),
        ({"device_map": {"": "disk"}}, "a device_map value of disk"),
        ({"device_map": {"inner": "cpu", "fixed": "disk"}}, "a device_map value of disk"),
    ],
)
def test_disk_offload_is_refused_naming_what_asked_for_it(
    small_folder: Path, kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _Small.from_pretrained(small_folder, config=PretrainedConfig(), **kwargs)
    assert _message(info) == (
        f"{named}: disk offload is not supported; load onto the CPU or a device (device_map='cpu' / 'auto'), "
        "or quantize to fit"
    )


def test_offload_arguments_that_ask_for_nothing_are_accepted(small_folder: Path) -> None:
    model = _Small.from_pretrained(
        small_folder, config=PretrainedConfig(), offload_folder=None, offload_state_dict=False, offload_buffers=False
    )
    assert isinstance(model, _Small)


def test_arguments_nothing_uses_are_refused_by_name(small_folder: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _Small.from_pretrained(small_folder, config=PretrainedConfig(), flavour="x", colour="y")
    assert _message(info) == (
        "from_pretrained() does not use colour, flavour: neither a loading argument nor a setting of "
        "PretrainedConfig; check the spelling (settings of a config= object go on it)"
    )
    with pytest.raises(ConfigError) as info:  # a state dict is not a config setting either
        _Small.from_pretrained(small_folder, state_dict={})
    assert _message(info).startswith("from_pretrained() does not use state_dict: neither a loading argument nor a ")


def test_a_config_given_as_a_folder_is_read_from_that_folder(small_folder: Path, tmp_path: Path) -> None:
    PretrainedConfig(flavour="other").save_pretrained(tmp_path / "config_only")
    model = _Small.from_pretrained(small_folder, config=str(tmp_path / "config_only"))
    assert model.config.flavour == "other"
    assert _Small.from_pretrained(small_folder).config.flavour == "saved"


def test_attn_implementation_is_checked_and_set_on_the_config(small_folder: Path) -> None:
    assert _Small.from_pretrained(small_folder, attn_implementation="eager").config._attn_implementation == "eager"
    with pytest.raises(Exception, match=r"attn_implementation"):
        _Small.from_pretrained(small_folder, attn_implementation="no-such-attention")


def test_torch_dtype_is_used_when_given(small_folder: Path) -> None:
    assert _Small.from_pretrained(small_folder, torch_dtype=torch.float16).inner.weight.dtype == torch.float16
    assert _Small.from_pretrained(small_folder, torch_dtype="bfloat16").inner.weight.dtype == torch.bfloat16
    assert _Small.from_pretrained(small_folder).inner.weight.dtype == torch.float32


def test_device_and_device_map_place_the_loaded_model(small_folder: Path) -> None:
    on_meta = _Small.from_pretrained(small_folder, device="meta")
    assert all(p.is_meta for p in on_meta.parameters())
    placed = _Small.from_pretrained(small_folder, device_map="cpu")
    assert placed.hf_device_map == {"": "cpu"} and placed.inner.weight.device.type == "cpu"
    assert not hasattr(_Small.from_pretrained(small_folder), "hf_device_map")


def test_loading_info_only_when_asked(small_folder: Path) -> None:
    assert isinstance(_Small.from_pretrained(small_folder), _Small)
    model, info = _Small.from_pretrained(small_folder, output_loading_info=True)
    assert isinstance(model, _Small) and info["missing_keys"] == [] and info["unexpected_keys"] == []


# -- quantizers: the argument, the flags, prepare and finish ----------------------------------------------------


class _RecordingQuantizer:
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
def recording(isolated_registry: Callable[..., Registry]) -> type[_RecordingQuantizer]:
    fresh = isolated_registry(modeling_module)
    for name in ("rec", "int8", "int4"):
        fresh.add("quantizers", name, _RecordingQuantizer)
    _RecordingQuantizer.calls = []
    return _RecordingQuantizer


@pytest.mark.parametrize(
    "kwargs, method",
    [({"quantization_config": {"quant_method": "rec"}}, "rec"), ({"load_in_8bit": True}, "int8"),
     ({"load_in_4bit": True}, "int4")],
)  # fmt: skip
def test_a_quantizer_asked_for_prepares_the_weights_and_finishes_the_model(
    small_folder: Path, recording: type[_RecordingQuantizer], kwargs: dict[str, Any], method: str
) -> None:
    plain = _Small.from_pretrained(small_folder)
    model = _Small.from_pretrained(small_folder, config=PretrainedConfig(), dtype=torch.float64, **kwargs)
    assert [c[0] for c in recording.calls] == ["prepare", "finish"]
    (_, prepared, names, dtype), (_, finished) = recording.calls
    assert prepared is model and finished is model and names == ["model.safetensors"] and dtype == torch.float64
    assert model.config.quantization_config == {"quant_method": method}
    torch.testing.assert_close(model.inner.weight, plain.inner.weight.double() * 2)


def test_a_quantization_config_saved_with_the_model_is_used(
    small_folder: Path, recording: type[_RecordingQuantizer]
) -> None:
    config = json.loads((small_folder / "config.json").read_text())
    (small_folder / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "rec"}}))
    model = _Small.from_pretrained(small_folder)
    assert [c[0] for c in recording.calls] == ["prepare", "finish"] and recording.calls[1][1] is model


# -- declared sizes, and errors the model class raises about its config ------------------------------------------


class _Layers(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(config.num_hidden_layers))
        self.post_init()


def test_a_layer_count_far_beyond_the_checkpoint_is_refused_unless_not_strict(tmp_path: Path) -> None:
    _Layers(PretrainedConfig(num_hidden_layers=2)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 67}))
    with pytest.raises(ConfigError) as info:
        _Layers.from_pretrained(tmp_path)
    assert _message(info).startswith(
        f"num_hidden_layers=67 in {tmp_path / 'config.json'} does not match the weights: its tensors have layer "
        "indices up to 1. "
    )
    model, info_dict = _Layers.from_pretrained(tmp_path, strict=False, output_loading_info=True)
    assert len(model.layers) == 67 and len(info_dict["missing_keys"]) == 130


class _Picky(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        if getattr(config, "width", 1) != 1:
            raise ConfigError(f"width={config.width} is not supported")
        self.inner = torch.nn.Linear(1, 1)
        self.post_init()


def test_a_config_value_the_class_refuses_is_reported_with_the_config_file(tmp_path: Path) -> None:
    _Picky(PretrainedConfig()).save_pretrained(tmp_path)
    with pytest.raises(ConfigError) as info:
        _Picky.from_pretrained(tmp_path, width=3)
    assert _message(info) == f"{tmp_path / 'config.json'}: width=3 is not supported"


# -- construction on meta -------------------------------------------------------------------------------------


class _Valued(modeling_module.PreTrainedModel):
    """Parameters made from values (frozen or not), a bias-free layer, and a buffer made from values."""

    config_class = PretrainedConfig
    built = 0

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        type(self).built += 1
        self.ones = torch.nn.Parameter(torch.ones(3))
        self.frozen = torch.nn.Parameter(torch.arange(3.0), requires_grad=False)
        self.bare = torch.nn.Linear(3, 3, bias=False)
        self.register_buffer("steps", torch.arange(4), persistent=False)
        self.post_init()


def test_inside_meta_parameters_every_parameter_is_on_meta_keeping_trainability() -> None:
    with modeling_module.meta_parameters():
        model = _Valued(PretrainedConfig())
    flags = {n: (p.is_meta, p.requires_grad) for n, p in model.named_parameters()}
    assert flags == {"ones": (True, True), "frozen": (True, False), "bare.weight": (True, True)}
    assert torch.equal(model.steps, torch.arange(4))  # made from values: kept


def test_a_model_whose_buffers_are_made_from_values_is_built_once(tmp_path: Path) -> None:
    _Valued(PretrainedConfig()).save_pretrained(tmp_path)
    _Valued.built = 0
    model = _Valued.from_pretrained(tmp_path)
    assert _Valued.built == 1 and not model.ones.is_meta and model.bare.bias is None


class _Held(modeling_module.PreTrainedModel):
    """One tensor made with a random or uninitialised factory, held as ``config.hold`` says; nothing else on meta."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.inner = torch.nn.Linear(2, 2)
        self.shape = (2, 2)
        self.names = {"a": "b"}
        made = torch.empty(2).fill_(3.0) if config.hold != "dict" else torch.randn(2)
        if config.hold == "attribute":
            self.held = made
        elif config.hold == "list":
            self.held = [made, 7]
        else:
            self.held = {"noise": made, "name": "n"}
        self.post_init()


@pytest.mark.parametrize("hold", ["attribute", "list", "dict"])
def test_tensors_held_in_attributes_lists_and_dicts_are_built_real(hold: str) -> None:
    model = modeling_module.build_on_meta(_Held, PretrainedConfig(hold=hold))
    held = {"attribute": lambda h: h, "list": lambda h: h[0], "dict": lambda h: h["noise"]}[hold](model.held)
    assert not held.is_meta
    if hold != "dict":
        # exact: a constant filled in, nothing computed
        assert torch.equal(held, torch.full((2,), 3.0))
    assert model.inner.weight.is_meta  # the second build still puts parameters on meta


def test_a_model_built_in_another_thread_is_real_and_initialised() -> None:
    built: list[torch.nn.Module] = []
    errors: list[BaseException] = []

    def construct() -> None:
        try:
            built.append(_Valued(PretrainedConfig()))
        except BaseException as exc:  # reported below
            errors.append(exc)

    worker = threading.Thread(target=construct)
    worker.start()
    worker.join()
    assert not errors
    model = built[0]
    assert not any(p.is_meta for p in model.parameters())
    # exact: a constant, nothing computed
    assert torch.equal(model.ones, torch.ones(3)) and model.bare.weight.abs().sum() > 0


# -- the meta construction mode --------------------------------------------------------------------------------


def test_inside_meta_parameters_tensor_operations_still_compute_their_results() -> None:
    with modeling_module.meta_parameters():
        weight = torch.empty(2, 3)
        assert weight.is_meta
        assert weight.t().shape == (3, 2) and weight.sum(0).shape == (3,)
        # exact: small integers add exactly in float32
        assert torch.equal(torch.tensor([1.0, 2.0]), torch.full((2,), 1.0) + torch.arange(2.0))
        torch.nn.init.normal_(tensor=weight)  # initialisers leave meta tensors alone
        real = torch.ones(2, 3)
        torch.nn.init.zeros_(real)
        # exact: zeros_ writes constants
        assert torch.equal(real, torch.zeros(2, 3))
        assert torch.empty(2, dtype=torch.float16).dtype == torch.float16
    assert re.fullmatch(r"cpu", torch.empty(1).device.type)


def test_a_config_value_the_class_refuses_is_reported_with_the_weights_file_that_holds_it(
    tmp_path: Path, one_file_format: Any
) -> None:
    tensors = {"inner.weight": [[0.5]], "inner.bias": [0.0]}
    path = tmp_path / "model.onefile"
    path.write_text(json.dumps({"config": {"width": 3}, "tensors": tensors}))
    with pytest.raises(ConfigError) as info:
        _Picky.from_pretrained(tmp_path)
    assert _message(info) == f"{path}: width=3 is not supported"
    path.write_text(json.dumps({"config": {"width": 1}, "tensors": tensors}))
    # exact: 0.5 loaded from the file, nothing computed
    assert _Picky.from_pretrained(tmp_path).inner.weight.item() == 0.5


class _ShapesOnly:
    """A format that lists tensor shapes (two layers)."""

    def shapes(self, files: list[Path]) -> dict[str, tuple[int, ...]]:
        return {"layers.0.weight": (2, 2), "layers.1.weight": (2, 2)}


def test_check_declared_sizes_is_strict_by_default(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], _ShapesOnly()
    modeling_module.check_declared_sizes(PretrainedConfig(num_hidden_layers=66), fmt, files)
    with pytest.raises(ConfigError, match=r"^num_hidden_layers=67 in .* its tensors have layer indices up to 1\. "):
        modeling_module.check_declared_sizes(PretrainedConfig(num_hidden_layers=67), fmt, files)


class _Widened(modeling_module.PreTrainedModel):
    """A model class that takes a positional argument after its config."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig, width: int = 1) -> None:
        super().__init__(config)
        self.width = width
        self.inner = torch.nn.Linear(2, 2)
        self.post_init()


def test_positional_arguments_after_the_path_reach_the_model_class(tmp_path: Path) -> None:
    _Widened(PretrainedConfig()).save_pretrained(tmp_path)
    assert _Widened.from_pretrained(tmp_path, 5).width == 5
    assert _Widened.from_pretrained(tmp_path).width == 1


def test_the_format_is_asked_for_tensors_in_the_load_dtype(tmp_path: Path, one_file_format: Any) -> None:
    # The format contract (hookspecs: load(files, dtype=...)): GGUF dequantises straight into the load dtype,
    # so a bfloat16 load never holds a float32 copy of the weights.
    tensors = {"inner.weight": [[0.5]], "inner.bias": [0.0]}
    (tmp_path / "model.onefile").write_text(json.dumps({"config": {"width": 1}, "tensors": tensors}))
    model = _Picky.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert one_file_format.asked == [torch.bfloat16] and model.inner.weight.dtype == torch.bfloat16

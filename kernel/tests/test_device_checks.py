"""A device that does not exist is refused by name before any weights are read (``device=``, ``device_map=``,
``pipeline(device=...)``), and a device-placed load moves each tensor as it is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import ConfigError, DeviceError, PretrainedConfig
from microformers import modeling as modeling_module
from microformers.devices import check_device, check_device_map


class _Small(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.inner = torch.nn.Linear(3, 3)
        self.outer = torch.nn.Linear(3, 2)
        self.post_init()


@pytest.fixture
def small_folder(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    folder = tmp_path / "small"
    _Small(PretrainedConfig()).save_pretrained(folder)
    return folder


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each call of the checkpoint format's ``load``: a refusal must come before the first."""
    from microformers.formats.safetensors_format import SafetensorsFormat

    calls: list[str] = []
    original = SafetensorsFormat.load

    def load(self: Any, files: list[Path], **kwargs: Any) -> Any:
        calls.append(str(files[0]))
        return original(self, files, **kwargs)

    monkeypatch.setattr(SafetensorsFormat, "load", load)
    return calls


@pytest.mark.parametrize("argument", ["device", "device_map"])
@pytest.mark.parametrize("value", ["cuda", "cuda:0", 0, torch.device("cuda")])
def test_cuda_on_a_machine_without_it_is_refused_before_loading(
    small_folder: Path, reads: list[str], no_cuda: None, argument: str, value: Any
) -> None:
    with pytest.raises(DeviceError) as info:
        _Small.from_pretrained(small_folder, **{argument: value})
    message = str(info.value)
    assert message.startswith(f"{argument}=") and "no cuda device" in message and f"{argument}='cpu'" in message
    assert reads == []


def test_a_cuda_index_past_the_last_gpu_is_refused_before_loading(
    small_folder: Path, reads: list[str], one_gpu: None
) -> None:
    with pytest.raises(DeviceError, match=r"device_map='cuda:3': this machine has 1 cuda device\(s\) \(cuda:0\)"):
        _Small.from_pretrained(small_folder, device_map="cuda:3")
    with pytest.raises(DeviceError, match=r"device=3: this machine has 1 cuda device"):
        _Small.from_pretrained(small_folder, device=3)
    with pytest.raises(DeviceError, match=r"device_map\['outer'\]='cuda:1'"):
        _Small.from_pretrained(small_folder, device_map={"": "cpu", "outer": "cuda:1"})
    assert reads == []


def test_a_malformed_device_is_refused_with_the_argument_named(small_folder: Path, reads: list[str]) -> None:
    with pytest.raises(DeviceError, match=r"device_map='gpu0' is not a device .*use 'cpu', 'cuda'"):
        _Small.from_pretrained(small_folder, device_map="gpu0")
    with pytest.raises(DeviceError, match=r"device=True is not a device"):
        _Small.from_pretrained(small_folder, device=True)
    assert reads == []
    assert issubclass(DeviceError, ConfigError)  # callers catching ConfigError still see it


def test_devices_that_exist_pass(no_cuda: None) -> None:
    assert check_device("cpu", "device") == torch.device("cpu")
    assert check_device(-1, "device") == torch.device("cpu")  # pipeline(device=-1)
    assert check_device(torch.device("meta"), "device") == torch.device("meta")
    check_device_map("auto")  # picks the CPU here
    check_device_map({"": "cpu", "lm_head": "disk"})  # disk is from_pretrained's own refusal


def test_cuda_indexes_within_the_count_pass(one_gpu: None) -> None:
    assert check_device("cuda:0", "device_map") == torch.device("cuda", 0)
    assert check_device(0, "device") == torch.device("cuda", 0)


def test_a_placed_load_moves_each_tensor_as_it_is_read(small_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a device_map, _materialise gets a placement and moves every tensor (here to the CPU, and to
    ``meta`` through a recorded placement), one by one, before the model is put together."""
    loaded = _Small.from_pretrained(small_folder, device_map="cpu")
    assert loaded.hf_device_map == {"": "cpu"}
    assert all(p.device.type == "cpu" for p in loaded.parameters())

    asked: list[str] = []
    original = modeling_module.PreTrainedModel._materialise

    def materialise(self: Any, source: Any, *args: Any, placement: Any = None, **kwargs: Any) -> Any:
        assert placement is not None

        def recorded(name: str) -> torch.device | None:
            asked.append(name)
            return torch.device("meta")  # stands for an accelerator: no memory, visible per tensor

        return original(self, source, *args, placement=recorded, **kwargs)

    monkeypatch.setattr(modeling_module.PreTrainedModel, "_materialise", materialise)
    placed = _Small.from_pretrained(small_folder, device="meta")
    assert sorted(asked) == ["inner.bias", "inner.weight", "outer.bias", "outer.weight"]
    assert all(p.is_meta for p in placed.parameters())


def test_tensor_placement_takes_the_longest_prefix(one_gpu: None) -> None:
    place = modeling_module.tensor_placement(None, {"": "cpu", "model.layers.1": "cuda:0"})
    assert place is not None
    assert place("model.layers.1.mlp.weight") == torch.device("cuda", 0)
    assert place("model.layers.10.mlp.weight") == torch.device("cpu")
    assert place("lm_head.weight") == torch.device("cpu")
    assert modeling_module.tensor_placement(None, None) is None
    assert modeling_module.tensor_placement("cpu", None)("x") == torch.device("cpu")
    assert modeling_module.tensor_placement("cpu", "auto")("x") == torch.device("cuda", 0)  # device_map wins


def test_pipeline_refuses_a_missing_device_before_loading(small_folder: Path, no_cuda: None) -> None:
    from microformers import pipeline

    with pytest.raises(DeviceError, match=r"device='cuda'.*no cuda device"):
        pipeline("text-generation", model=str(small_folder / "not-read"), device="cuda")
    with pytest.raises(DeviceError, match=r"device=0.*no cuda device"):
        pipeline("text-generation", model=str(small_folder / "not-read"), device=0)
    with pytest.raises(DeviceError, match=r"device_map='cuda:0'.*no cuda device"):
        pipeline("text-generation", model=str(small_folder / "not-read"), device_map="cuda:0")

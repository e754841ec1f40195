"""``microformers serve --device``: a device this machine lacks, or --pack-weights off the CPU, is refused
before the model is read."""

from __future__ import annotations

import argparse

import pytest
import torch

from microformers.errors import DeviceError, InputError


def _args(**flags: object) -> argparse.Namespace:
    values = {
        "model": "/nonexistent/model", "gguf_file": None, "quantize": None, "dtype": None, "model_name": None,
        "max_batch_size": 4, "max_queue": 4, "max_body_bytes": 1 << 20, "pack_weights": False, "device": "cpu",
    }  # fmt: skip
    return argparse.Namespace(**{**values, **flags})


def test_device_flag_defaults_to_the_cpu() -> None:
    from microformers_serve.commands import serve_command

    parser = argparse.ArgumentParser()
    serve_command(parser)
    assert parser.parse_args([]).device == "cpu"
    assert parser.parse_args(["--device", "cuda:1"]).device == "cuda:1"


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_a_missing_gpu_is_refused_before_loading(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    from microformers_serve.commands import load_server

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match=rf"--device='{device}': this machine has no cuda device"):
        load_server(_args(device=device))


def test_a_gpu_index_past_the_last_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from microformers_serve.commands import load_server

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(DeviceError, match=r"--device='cuda:3': this machine has 1 cuda device\(s\) \(cuda:0\)"):
        load_server(_args(device="cuda:3"))
    with pytest.raises(InputError, match="--pack-weights.*--device cuda:0.*--device cpu"):
        load_server(_args(device="cuda:0", pack_weights=True))

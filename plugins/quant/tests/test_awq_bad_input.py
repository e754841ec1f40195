"""AutoAWQ folders whose settings or tensors do not fit: errors naming the file, the tensor and the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from microformers import AutoModelForCausalLM
from microformers.errors import CheckpointError, ConfigError
from microformers_quant.gptq import AwqQuantizer

from .gptq_packing import write_awq_folder

STEM = "model.layers.0.self_attn.q_proj"


@pytest.fixture(scope="module")
def awq_state(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    folder = write_awq_folder(tiny_llama, tmp_path_factory.mktemp("awq") / "awq", 32, with_expected=False)
    return folder, load_file(folder / "model.safetensors")


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"bits": 8}, r"bits=8: AWQ checkpoints are 4-bit"),
        ({"group_size": -1}, r"group_size must be a positive integer, got -1"),
        ({"zero_point": False}, r"zero_point=false"),
        ({"version": "exllama"}, r"\['exllama'\]: AWQ checkpoints packed for the 'gemm' kernel"),
        ({"bogus": 1}, r"unknown field\(s\) \['bogus'\]"),
    ],
)
def test_awq_settings_that_cannot_load_name_the_setting(config: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        AwqQuantizer({"quant_method": "awq", **config})


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            lambda s: s.update({f"{STEM}.qweight": s[f"{STEM}.qweight"].float()}),
            r"'\S+q_proj\.qweight' is torch\.float32",
        ),
        (
            lambda s: s.update({f"{STEM}.qzeros": s[f"{STEM}.qzeros"][:1]}),
            r"layer '\S+q_proj' has qweight .* qzeros \(1,",
        ),
        (lambda s: s.update({f"{STEM}.scales": s[f"{STEM}.scales"].to(torch.int32)}), r"'\S+q_proj\.scales' must be"),
        (lambda s: s.update({f"{STEM}.g_idx": torch.zeros(64, dtype=torch.int32)}), r"g_idx' is a GPTQ tensor"),
    ],
    ids=["float-qweight", "short-qzeros", "integer-scales", "gptq-g_idx"],
)
def test_awq_tensors_that_do_not_fit_name_the_file_and_tensor(
    awq_state: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path, change: object, match: str
) -> None:
    source, state = awq_state
    folder = tmp_path / "broken"
    folder.mkdir()
    broken = dict(state)
    change(broken)  # type: ignore[operator]
    save_file(broken, str(folder / "model.safetensors"))
    (folder / "config.json").write_text((source / "config.json").read_text())
    with pytest.raises(CheckpointError, match=rf"model\.safetensors.*{match}"):
        AutoModelForCausalLM.from_pretrained(folder)

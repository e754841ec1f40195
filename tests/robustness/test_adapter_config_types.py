"""adapter_config.json settings of the wrong type are refused naming the file and the setting (issue 42, item 8):
string ranks and alphas, flags given as strings ("no" would be truthy), malformed patterns and layer lists."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import microformers
from microformers.errors import ConfigError
from microformers_peft.config import AdapterError

from ._build import llama_folder

CASES: dict[str, dict[str, Any]] = {
    "string alpha": {"lora_alpha": "x"},
    "list alpha": {"lora_alpha": [8]},
    "string rank in rank_pattern": {"rank_pattern": {"q_proj": "2"}},
    "rank_pattern as a list": {"rank_pattern": ["q_proj"]},
    "boolean rank in rank_pattern": {"rank_pattern": {"q_proj": True}},
    "string alpha in alpha_pattern": {"alpha_pattern": {"q_proj": "x"}},
    "string use_rslora": {"use_rslora": "no"},
    "string fan_in_fan_out": {"fan_in_fan_out": "yes"},
    "string inference_mode": {"inference_mode": "x"},
    "integer layers_pattern": {"layers_pattern": 3, "layers_to_transform": [0]},
    "string layer indices": {"layers_to_transform": ["0"]},
    "negative layer index": {"layers_to_transform": -1},
    "integer task_type": {"task_type": 5},
    "integer base model": {"base_model_name_or_path": 5},
    "integer target_modules": {"target_modules": 5},
    "object target_modules": {"target_modules": {"q_proj": 1}},
    "integer exclude_modules": {"exclude_modules": 5},
    "integer modules_to_save": {"modules_to_save": 7},
}


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("adapter-types")
    base = llama_folder(tmp / "base")
    model = microformers.AutoModelForCausalLM.from_pretrained(base)
    model.add_adapter(microformers.LoraConfig(r=2, target_modules=["q_proj"]))
    model.save_pretrained(tmp / "adapter")
    return base, tmp / "adapter"


@pytest.mark.parametrize("case", list(CASES))
def test_wrongly_typed_adapter_setting_is_refused_naming_file_and_setting(
    adapter: tuple[Path, Path], tmp_path: Path, case: str
) -> None:
    base, good = adapter
    folder = tmp_path / "adapter"
    shutil.copytree(good, folder)
    settings = json.loads((folder / "adapter_config.json").read_text())
    change = CASES[case]
    (folder / "adapter_config.json").write_text(json.dumps({**settings, **change}))
    model = microformers.AutoModelForCausalLM.from_pretrained(base)
    setting = next(iter(change)) if case != "integer layers_pattern" else "layers_pattern"
    with pytest.raises(ConfigError, match=rf"adapter_config\.json: .*{setting}="):
        model.load_adapter(folder)
    assert not any(".lora_A." in name for name, _ in model.named_parameters())  # nothing half-built


def test_well_typed_settings_still_load(adapter: tuple[Path, Path], tmp_path: Path) -> None:
    base, good = adapter
    folder = tmp_path / "adapter"
    shutil.copytree(good, folder)
    settings = json.loads((folder / "adapter_config.json").read_text())
    settings.update(lora_alpha=4, rank_pattern={"q_proj": 2}, alpha_pattern={"q_proj": 3.5}, layers_to_transform=[0, 1])
    (folder / "adapter_config.json").write_text(json.dumps(settings))
    model = microformers.AutoModelForCausalLM.from_pretrained(base)
    model.load_adapter(folder)
    assert model.active_adapters() == ["default"]


@pytest.mark.parametrize("ranks", [{"r": 10**9}, {"r": 2, "rank_pattern": {"q_proj": 10**9}}])
def test_a_rank_too_large_for_memory_is_refused_before_allocating(
    adapter: tuple[Path, Path], ranks: dict[str, Any]
) -> None:
    """add_adapter with r of 10**9 (LoRA matrices of ~477 GiB even on this tiny model) is refused before any allocation,
    naming the ranks and the memory, instead of the allocator's RuntimeError."""
    base, _ = adapter
    model = microformers.AutoModelForCausalLM.from_pretrained(base)
    with pytest.raises(AdapterError, match=r"^add_adapter\('default'\): r/rank_pattern \(up to rank 1,000,000,000\) "):
        model.add_adapter(microformers.LoraConfig(target_modules=["q_proj"], **ranks))
    assert not any(".lora_A." in name for name, _ in model.named_parameters())  # nothing half-built


def test_modules_to_save_that_match_nothing_are_refused_before_anything_is_built(adapter: tuple[Path, Path]) -> None:
    base, _ = adapter
    model = microformers.AutoModelForCausalLM.from_pretrained(base)
    config = microformers.LoraConfig(r=2, target_modules=["q_proj"], modules_to_save=["classifier"])
    with pytest.raises(AdapterError, match=r"^add_adapter\('default'\): modules_to_save=\['classifier'\] matches no "):
        model.add_adapter(config)  # it was accepted, and nothing was saved or trained for it
    assert not any(".lora_A." in name for name, _ in model.named_parameters())
    model.add_adapter(microformers.LoraConfig(r=2, target_modules=["q_proj"], modules_to_save=["lm_head"]))
    assert any("modules_to_save" in name for name, _ in model.named_parameters())


def test_adapter_names_are_checked_as_given(adapter: tuple[Path, Path]) -> None:
    base, folder = adapter
    model = microformers.AutoModelForCausalLM.from_pretrained(base)
    with pytest.raises(AdapterError, match=r"^adapter_name='': use a non-empty name"):  # was renamed 'default'
        model.add_adapter(microformers.LoraConfig(r=2, target_modules=["q_proj"]), adapter_name="")
    model.load_adapter(folder)
    with pytest.raises(AdapterError, match=r"delete_adapter\('default'\) first"):  # the name, not '{name}'
        model.load_adapter(folder)

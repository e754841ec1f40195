"""LoRA on ViT with ``peft``-identical files (issue 36), both directions.

The reference (transformers 5) names ViT's modules ``vit.layers.N.attention.q_proj`` / ``mlp.fc1`` in memory while its
weight files keep ``vit.encoder.layer.N.attention.attention.query`` / ``intermediate.dense``; ``peft`` adapters made on
it carry the new names. ViT declares the mapping (``reference_module_renames``) and the LoRA plugin loads either
naming and saves the reference's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from parity.harness import assert_close, load_ours, make_reference_checkpoint

pytest.importorskip("transformers")
peft = pytest.importorskip("peft", reason="peft (requirements-test.txt) is the adapter oracle")

ATOL = 1e-5
TINY: dict[str, Any] = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
                        "image_size": 16, "patch_size": 4, "num_labels": 3}  # fmt: skip
AUTO = "AutoModelForImageClassification"
# the same adapter in the reference's names (peft on the reference) and in ours
REFERENCE_LORA: dict[str, Any] = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "o_proj", "fc2"],
                                  "rank_pattern": {"fc2": 2}, "modules_to_save": ["classifier"]}  # fmt: skip
OUR_LORA: dict[str, Any] = {"r": 4, "lora_alpha": 8, "target_modules": ["query", "value", "output.dense"],
                            "rank_pattern": {"output.dense": 2}, "modules_to_save": ["classifier"]}  # fmt: skip
# legacy (and ours): one rule per reference module kind
LEGACY_NAMES = {"layers.{n}.attention.q_proj": "encoder.layer.{n}.attention.attention.query",
                "layers.{n}.attention.v_proj": "encoder.layer.{n}.attention.attention.value",
                "layers.{n}.attention.o_proj": "encoder.layer.{n}.attention.output.dense",
                "layers.{n}.mlp.fc2": "encoder.layer.{n}.output.dense"}  # fmt: skip


def _pixels() -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))


def _perturb(model: torch.nn.Module, seed: int) -> None:
    """Adapter values no initialisation gives (B is zero at init): a wrong or skipped load shows in the logits."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name or "modules_to_save" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)


def _legacy_key(key: str) -> str:
    for reference, legacy in LEGACY_NAMES.items():
        head, _, tail = reference.partition("{n}")
        marker = f".{head}"
        if marker in key and tail in key:
            before, _, after = key.partition(marker)
            index, _, rest = after.partition(tail)
            if index.isdigit():
                return f"{before}.{legacy.replace('{n}', index)}{rest}"
    return key


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The base checkpoint (the reference's file), a peft-made adapter on the reference's ViT and that peft model."""
    transformers = pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("vit-lora")
    base_folder, _ = make_reference_checkpoint("ViTConfig", "ViTForImageClassification", tmp, **TINY)
    base = transformers.ViTForImageClassification.from_pretrained(str(base_folder), dtype=torch.float32)
    peft_model = peft.get_peft_model(base, peft.LoraConfig(**REFERENCE_LORA))
    _perturb(peft_model, 1)
    peft_model.eval()
    adapter = tmp / "peft-adapter"
    peft_model.save_pretrained(str(adapter))
    return {"base": base_folder, "adapter": adapter, "peft": peft_model}


def test_reference_renamed_vit_modules_so_peft_files_use_new_names(built: dict[str, Any]) -> None:
    """The premise: without the declared mapping these names would match nothing of our ViT."""
    from safetensors.torch import load_file

    keys = set(load_file(str(built["adapter"] / "adapter_model.safetensors")))
    assert "base_model.model.vit.layers.0.attention.q_proj.lora_A.weight" in keys
    assert "base_model.model.vit.layers.1.mlp.fc2.lora_B.weight" in keys
    ours = load_ours(built["base"], AUTO)
    paths = {name for name, _ in ours.named_modules()}
    assert "vit.layers.0.attention.q_proj" not in paths and "vit.encoder.layer.0.attention.attention.query" in paths


def test_peft_adapter_from_the_reference_loads_here_with_the_same_logits(built: dict[str, Any]) -> None:
    ours = load_ours(built["adapter"], AUTO)  # base from base_model_name_or_path, then the adapter
    adapted = {n.rpartition(".lora_A")[0] for n, _ in ours.named_parameters() if ".lora_A." in n}
    assert "vit.encoder.layer.1.attention.attention.query" in adapted and "vit.encoder.layer.0.output.dense" in adapted
    # rank_pattern {"fc2": 2} reached our output.dense, not attention.output.dense (o_proj keeps r=4)
    layer = ours.vit.encoder.layer[0]
    assert layer.output.dense.lora_A["default"].weight.shape[0] == 2
    assert layer.attention.output.dense.lora_A["default"].weight.shape[0] == 4
    pixels = _pixels()
    with torch.no_grad():
        expected = built["peft"](pixel_values=pixels).logits
        assert_close(ours(pixel_values=pixels).logits, expected, atol=ATOL)
        ours.disable_adapters()  # the adapter changes the output: the comparison above is not vacuous
        with built["peft"].disable_adapter():
            base_logits = built["peft"](pixel_values=pixels).logits
        assert_close(ours(pixel_values=pixels).logits, base_logits, atol=ATOL)
        assert (base_logits - expected).abs().max() > 1e-3


def test_our_vit_adapter_is_saved_in_the_reference_names_and_loads_in_peft(
    built: dict[str, Any], tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    from microformers import LoraConfig

    transformers = pytest.importorskip("transformers")
    ours = load_ours(built["base"], AUTO)
    ours.add_adapter(LoraConfig(**OUR_LORA))  # our module names
    _perturb(ours, 2)
    ours.eval()
    ours.save_pretrained(tmp_path / "ours")
    assert set(load_file(str(tmp_path / "ours" / "adapter_model.safetensors"))) == set(
        load_file(str(built["adapter"] / "adapter_model.safetensors"))
    ), "tensor names differ from the ones peft writes on the reference's ViT for the same modules"
    saved = json.loads((tmp_path / "ours" / "adapter_config.json").read_text())
    assert sorted(saved["target_modules"]) == ["attention.o_proj", "mlp.fc2", "q_proj", "v_proj"]
    assert saved["rank_pattern"] == {"attention.o_proj": 2, "mlp.fc2": 2}
    base = transformers.ViTForImageClassification.from_pretrained(str(built["base"]), dtype=torch.float32)
    theirs = peft.PeftModel.from_pretrained(base, str(tmp_path / "ours")).eval()
    pixels = _pixels()
    with torch.no_grad():
        assert_close(ours(pixel_values=pixels).logits, theirs(pixel_values=pixels).logits, atol=ATOL)
    again = load_ours(built["base"], AUTO)  # and the reference-named file loads back here
    again.load_adapter(tmp_path / "ours")
    with torch.no_grad():
        assert_close(again(pixel_values=pixels).logits, ours(pixel_values=pixels).logits, atol=ATOL)


def test_regex_targets_over_our_names_are_spelled_out_for_peft(built: dict[str, Any], tmp_path: Path) -> None:
    from microformers import LoraConfig

    transformers = pytest.importorskip("transformers")
    ours = load_ours(built["base"], AUTO)
    ours.add_adapter(LoraConfig(r=2, target_modules=r".*\.attention\.attention\.(query|key)", layers_to_transform=[1]))
    _perturb(ours, 4)
    ours.eval()
    ours.save_pretrained(tmp_path / "regex")
    saved = json.loads((tmp_path / "regex" / "adapter_config.json").read_text())
    assert sorted(saved["target_modules"]) == ["vit.layers.1.attention.k_proj", "vit.layers.1.attention.q_proj"]
    base = transformers.ViTForImageClassification.from_pretrained(str(built["base"]), dtype=torch.float32)
    theirs = peft.PeftModel.from_pretrained(base, str(tmp_path / "regex")).eval()
    pixels = _pixels()
    with torch.no_grad():
        assert_close(ours(pixel_values=pixels).logits, theirs(pixel_values=pixels).logits, atol=ATOL)


def test_legacy_named_adapter_files_still_load(built: dict[str, Any], tmp_path: Path) -> None:
    """Adapters made on the reference before the rename (legacy module names) load as before."""
    from safetensors.torch import load_file, save_file

    legacy = tmp_path / "legacy"
    legacy.mkdir()
    tensors = load_file(str(built["adapter"] / "adapter_model.safetensors"))
    renamed = {_legacy_key(k): v for k, v in tensors.items()}
    assert any("encoder.layer.0.attention.attention.query" in k for k in renamed)
    save_file(renamed, str(legacy / "adapter_model.safetensors"))
    config = json.loads((built["adapter"] / "adapter_config.json").read_text())
    fc2 = {f"vit.encoder.layer.{i}.output.dense": 2 for i in range(2)}  # not attention.output.dense (o_proj)
    config.update(target_modules=["query", "value", "output.dense"], rank_pattern=fc2)
    (legacy / "adapter_config.json").write_text(json.dumps(config))
    ours = load_ours(legacy, AUTO)
    pixels = _pixels()
    with torch.no_grad():
        assert_close(ours(pixel_values=pixels).logits, built["peft"](pixel_values=pixels).logits, atol=ATOL)

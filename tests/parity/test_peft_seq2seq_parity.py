"""LoRA on encoder-decoder models (T5, mT5, BART, mBART, Marian) against the ``peft`` library, both directions.

``peft``'s ``PeftModelForSeq2SeqLM`` (``task_type="SEQ_2_SEQ_LM"``) is the oracle: an adapter it saves loads
here through ``AutoModelForSeq2SeqLM.from_pretrained(adapter_folder)`` with the same logits and loss (labels
or ``decoder_input_ids``, padded batches); one saved here loads in ``peft`` with the same outputs, the same
tensor names and ``adapter_config.json`` values; merged weights equal ``peft``'s ``merge_and_unload``;
greedy and beam ``generate`` and ``get_encoder()`` agree. The base model is always re-read from its folder
(the harness redraws weights in memory before saving).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import assert_close
from parity.harness import (
    SCORE_OUTPUTS,
    assert_generation_matches,
    load_ours,
    make_reference_model,
    padded_batch,
)

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft", reason="peft (requirements-test.txt) is the adapter oracle")

ATOL = 1e-5
T5 = {"vocab_size": 128, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4,
      "relative_attention_num_buckets": 8, "relative_attention_max_distance": 20, "decoder_start_token_id": 0,
      "pad_token_id": 0, "eos_token_id": 1}  # fmt: skip
BART = {"vocab_size": 150, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 48, "decoder_ffn_dim": 40, "max_position_embeddings": 64,
        "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2, "forced_eos_token_id": None,
        "attn_implementation": "eager"}  # fmt: skip
MARIAN = {**BART, "vocab_size": 120, "decoder_layers": 3, "decoder_attention_heads": 2, "pad_token_id": 119,
          "decoder_start_token_id": 119, "eos_token_id": 0, "scale_embedding": True}  # fmt: skip
SEQ2SEQ = {"task_type": "SEQ_2_SEQ_LM"}

# name -> (config class, reference model class, config, LoRA settings)
CASES: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "t5-default-targets": ("T5Config", "T5ForConditionalGeneration", T5, {**SEQ2SEQ, "r": 4, "lora_alpha": 8}),
    "t5-v1.1-all-linear-modules-to-save": ("T5Config", "T5ForConditionalGeneration",
        {**T5, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
        {**SEQ2SEQ, "r": 4, "lora_alpha": 16, "target_modules": "all-linear", "modules_to_save": ["final_layer_norm"],
         "rank_pattern": {"wo": 2}, "alpha_pattern": {"o": 3}}),
    "mt5-layers-rslora": ("MT5Config", "MT5ForConditionalGeneration", T5,
        {**SEQ2SEQ, "r": 4, "lora_alpha": 8, "target_modules": ["q", "k", "v", "o"], "use_rslora": True,
         "layers_to_transform": [1], "layers_pattern": "block"}),
    "bart-default-targets-lora-bias": ("BartConfig", "BartForConditionalGeneration", BART,
        {**SEQ2SEQ, "r": 4, "lora_alpha": 8, "bias": "lora_only"}),
    "mbart-regex-bias-all": ("MBartConfig", "MBartForConditionalGeneration", BART,
        {**SEQ2SEQ, "r": 2, "lora_alpha": 4, "bias": "all",
         "target_modules": r"model\.decoder\.layers\.\d+\.(self_attn|encoder_attn)\.(q_proj|v_proj)|.*\.fc1"}),
    "marian-list-modules-to-save": ("MarianConfig", "MarianMTModel", MARIAN,
        {**SEQ2SEQ, "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "out_proj"],
         "modules_to_save": ["layer_norm"]}),
}  # fmt: skip
GENERATION_CASES = ["t5-default-targets", "bart-default-targets-lora-bias", "marian-list-modules-to-save"]


def _perturb(model: torch.nn.Module, seed: int, names: tuple[str, ...]) -> None:
    """Give the adapter (and whatever else it saves) values no initialisation would: a wrong load shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(part in name for part in names):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1 + ("norm" in name))


def _saved_parts(lora: dict[str, Any]) -> tuple[str, ...]:
    bias = {"none": (), "lora_only": (".base_layer.bias",), "all": ("bias",)}[lora.get("bias", "none")]
    return ("lora_", "modules_to_save", *bias)


def _make_base(case: str, folder: Path) -> Path:
    config_cls, model_cls, config, _lora = CASES[case]
    reference = make_reference_model(config_cls, model_cls, **config)
    with torch.no_grad():  # Marian's sinusoidal tables are frozen parameters: put them back after the redraw
        for module in reference.modules():
            if hasattr(module, "create_weight"):
                module.weight.copy_(module.create_weight())
    reference.save_pretrained(folder)
    return folder


def _reference(case: str, folder: Path) -> Any:
    return getattr(transformers, CASES[case][1]).from_pretrained(str(folder), dtype=torch.float32).eval()


def _batch(case: str) -> dict[str, torch.Tensor]:
    """Right-padded sources and labels (padding -100), as a seq2seq data collator makes them."""
    config = CASES[case][2]
    vocab, pad = config["vocab_size"] - 1, config["pad_token_id"]
    ids, mask = padded_batch(vocab, [9, 5, 7], pad_token_id=pad, side="right", seed=1)
    targets, target_mask = padded_batch(vocab, [6, 3, 4], pad_token_id=pad, side="right", seed=2)
    return {"input_ids": ids, "attention_mask": mask, "labels": targets.masked_fill(target_mask == 0, -100)}


def _decoder_batch(case: str) -> dict[str, torch.Tensor]:
    batch = _batch(case)
    config = CASES[case][2]
    decoder_ids, _ = padded_batch(config["vocab_size"] - 1, [5, 5, 5], seed=4)
    return {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "decoder_input_ids": decoder_ids,
    }


def _build(case: str, tmp: Path) -> dict[str, Any]:
    """The base folder, a peft-made adapter folder and the peft model holding it."""
    lora = dict(CASES[case][3])
    base_folder = _make_base(case, tmp / "base")
    if "target_modules" not in lora and case.startswith(("mbart", "marian")):
        lora["target_modules"] = ["q_proj", "v_proj"]  # peft has no default for these model types
    peft_model = peft.get_peft_model(_reference(case, base_folder), peft.LoraConfig(init_lora_weights=False, **lora))
    assert type(peft_model).__name__ == "PeftModelForSeq2SeqLM"
    _perturb(peft_model, 1, _saved_parts(lora))
    peft_model.eval()
    adapter = tmp / "peft-adapter"
    peft_model.save_pretrained(str(adapter))
    return {"base": base_folder, "adapter": adapter, "peft": peft_model}


class _Built(dict):
    """Cases built on first use (each xdist worker builds only the ones its tests need)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory

    def __missing__(self, case: str) -> dict[str, Any]:
        self[case] = _build(case, self.factory.mktemp(case))
        return self[case]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _Built(tmp_path_factory)


@pytest.mark.parametrize("case", list(CASES))
def test_peft_adapter_loads_here_with_the_same_logits_and_loss(built: dict[str, dict[str, Any]], case: str) -> None:
    entry = built[case]
    ours = load_ours(entry["adapter"], "AutoModelForSeq2SeqLM")  # base from base_model_name_or_path, then the adapter
    assert ours.active_adapters() == ["default"]
    theirs = entry["peft"]
    with torch.no_grad():
        for inputs in (_batch(case), _decoder_batch(case)):
            want = theirs(**inputs)
            got = ours(**inputs)
            assert_close(got.logits, want.logits, atol=ATOL)
            if "labels" in inputs:
                assert_close(got.loss, want.loss, atol=ATOL, msg="loss")
        inputs = _batch(case)
        expected = theirs(**inputs).logits
        ours.disable_adapters()  # the adapter changes the output: the comparison above is not vacuous
        with theirs.disable_adapter():
            base_logits = theirs(**inputs).logits
        assert_close(ours(**inputs).logits, base_logits, atol=ATOL)
        assert (base_logits - expected).abs().max() > 1e-3
        ours.enable_adapters()
        assert_close(ours(**inputs).logits, expected, atol=ATOL)


@pytest.mark.parametrize("case", list(CASES))
def test_our_adapter_loads_in_peft_with_the_same_files_and_outputs(
    built: dict[str, dict[str, Any]], case: str, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    from microformers import LoraConfig

    lora = CASES[case][3]
    ours = load_ours(built[case]["base"], "AutoModelForSeq2SeqLM")
    ours.add_adapter(LoraConfig(**lora), adapter_name="mine")
    _perturb(ours, 2, _saved_parts(lora))
    ours.eval()
    ours.save_pretrained(tmp_path / "ours")
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]

    # the same tensor names as peft's for the same settings ...
    mine = load_file(str(tmp_path / "ours" / "adapter_model.safetensors"))
    assert set(mine) == set(load_file(str(built[case]["adapter"] / "adapter_model.safetensors"))), (
        "tensor names differ from the ones peft writes for the same settings"
    )
    assert any(k.startswith("base_model.model.") and k.endswith(".lora_A.weight") for k in mine)
    # ... and adapter_config.json: every key we write is peft's, with peft's value
    ours_config = json.loads((tmp_path / "ours" / "adapter_config.json").read_text())
    peft_config = json.loads((built[case]["adapter"] / "adapter_config.json").read_text())
    assert set(ours_config) <= set(peft_config), set(ours_config) - set(peft_config)
    for key in ("base_model_name_or_path", "init_lora_weights"):  # ours: the loaded folder; peft's: set above
        ours_config.pop(key), peft_config.pop(key)
    for config in (ours_config, peft_config):
        if isinstance(config["target_modules"], list):  # peft writes a set in no fixed order
            config["target_modules"] = sorted(config["target_modules"])
    assert {k: peft_config[k] for k in ours_config} == ours_config

    theirs = peft.PeftModel.from_pretrained(_reference(case, built[case]["base"]), str(tmp_path / "ours")).eval()
    assert type(theirs).__name__ == "PeftModelForSeq2SeqLM"
    with torch.no_grad():
        for inputs in (_batch(case), _decoder_batch(case)):
            got, want = ours(**inputs), theirs(**inputs)
            assert_close(got.logits, want.logits, atol=ATOL)
            if "labels" in inputs:
                assert_close(got.loss, want.loss, atol=ATOL, msg="loss")


@pytest.mark.parametrize("case", list(CASES))
def test_merged_weights_equal_peft_merge_and_unload(built: dict[str, dict[str, Any]], case: str) -> None:
    ours = load_ours(built[case]["adapter"], "AutoModelForSeq2SeqLM")
    inputs = _batch(case)
    with torch.no_grad():
        unmerged = ours(**inputs).logits
        merged_model = ours.merge_and_unload()
        merged_logits = merged_model(**inputs).logits
    theirs = copy.deepcopy(built[case]["peft"]).merge_and_unload().state_dict()
    mine = merged_model.state_dict()
    assert not any("lora_" in k or "base_layer" in k or "modules_to_save" in k for k in mine)
    common = set(mine) & set(theirs)
    adapted = {k.removeprefix("base_model.model.").replace(".lora_A.default.weight", ".weight")
               for k in built[case]["peft"].state_dict() if ".lora_A." in k}  # fmt: skip
    assert adapted and adapted <= common, adapted - common
    for key in sorted(common):
        assert_close(mine[key], theirs[key], atol=1e-6, msg=key)
    assert_close(merged_logits, unmerged, atol=ATOL)


@pytest.mark.parametrize("case", GENERATION_CASES)
@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_and_get_encoder_pass_through_the_adapter(
    built: dict[str, dict[str, Any]], case: str, num_beams: int
) -> None:
    ours = load_ours(built[case]["adapter"], "AutoModelForSeq2SeqLM")
    theirs = built[case]["peft"]
    batch = _batch(case)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    settings = {"max_new_tokens": 6, "do_sample": False, "num_beams": num_beams, "min_new_tokens": 6}
    with torch.no_grad():
        expected = theirs.generate(input_ids=ids, attention_mask=mask, **settings, **SCORE_OUTPUTS)
        got = ours.generate(input_ids=ids, attention_mask=mask, **settings, **SCORE_OUTPUTS)
        assert_generation_matches(got, expected, prompt_length=1)
        encoded = ours.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        assert_close(encoded, theirs.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state, atol=ATOL,
                     msg="encoder output")  # fmt: skip


@pytest.mark.parametrize("model_type", ["mbart", "marian"])
def test_defaults_peft_lacks_are_written_out_and_load_in_peft(
    built: dict[str, dict[str, Any]], model_type: str, tmp_path: Path
) -> None:
    """peft has no default target_modules for mBART/Marian; ours (BART's) are written into the file, so it loads."""
    from microformers import LoraConfig

    case = next(c for c in CASES if c.startswith(model_type))
    ours = load_ours(built[case]["base"], "AutoModelForSeq2SeqLM")
    ours.add_adapter(LoraConfig(task_type="SEQ_2_SEQ_LM", init_lora_weights=False))
    ours.save_pretrained(tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["target_modules"] == ["q_proj", "v_proj"] and saved["task_type"] == "SEQ_2_SEQ_LM"
    theirs = peft.PeftModel.from_pretrained(_reference(case, built[case]["base"]), str(tmp_path / "adapter")).eval()
    with torch.no_grad():
        assert_close(ours(**_batch(case)).logits, theirs(**_batch(case)).logits, atol=ATOL)

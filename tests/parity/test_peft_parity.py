"""LoRA adapters against the ``peft`` library (a test oracle, like ``transformers``), both directions.

On tiny random Llama, GPT-2 and BERT checkpoints: an adapter saved by ``peft`` loads here through
``AutoModelFor*.from_pretrained(adapter_folder)`` with the same logits; an adapter saved here loads in
``peft`` with the same logits; merged weights equal ``peft``'s ``merge_and_unload``; greedy ``generate``
gives the same tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from parity.harness import (
    SCORE_OUTPUTS,
    assert_close,
    assert_generation_matches,
    load_ours,
    make_reference_checkpoint,
    random_ids,
)

pytest.importorskip("transformers")
peft = pytest.importorskip("peft", reason="peft (requirements-test.txt) is the adapter oracle")

ATOL = 1e-5
LLAMA = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "pad_token_id": 0,
         "attention_bias": True, "mlp_bias": True}  # fmt: skip
GPT2 = {"vocab_size": 99, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 32, "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip
BERT = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 37, "max_position_embeddings": 64, "pad_token_id": 0, "num_labels": 3}  # fmt: skip

# name -> (config class, model class == Auto head's reference class, our Auto class, config, LoRA settings)
CASES: dict[str, tuple[str, str, str, dict[str, Any], dict[str, Any]]] = {
    "llama-all-linear-lora-bias": ("LlamaConfig", "LlamaForCausalLM", "AutoModelForCausalLM", LLAMA,
        {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "bias": "lora_only",
         "rank_pattern": {"down_proj": 2}, "alpha_pattern": {"o_proj": 3}}),
    "gpt2-conv1d-rslora-bias-all": ("GPT2Config", "GPT2LMHeadModel", "AutoModelForCausalLM", GPT2,
        {"r": 4, "lora_alpha": 16, "target_modules": ["c_attn", "c_proj"], "fan_in_fan_out": True,
         "use_rslora": True, "bias": "all", "layers_to_transform": [1]}),
    "bert-seqcls-regex-modules-to-save": ("BertConfig", "BertForSequenceClassification",
        "AutoModelForSequenceClassification", BERT,
        {"r": 2, "lora_alpha": 4, "target_modules": r".*\.attention\.self\.(query|value)", "task_type": "SEQ_CLS",
         "modules_to_save": ["pooler.dense"]}),
}  # fmt: skip


def _perturb(model: torch.nn.Module, seed: int, names: tuple[str, ...]) -> None:
    """Give the adapter (and whatever else it saves) values no initialisation would: a wrong load shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(part in name for part in names):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)


def _saved_parts(lora: dict[str, Any]) -> tuple[str, ...]:
    bias = {"none": (), "lora_only": (".base_layer.bias",), "all": ("bias",)}[lora.get("bias", "none")]
    return ("lora_", "modules_to_save", *bias)


def _inputs(case: str) -> dict[str, torch.Tensor]:
    vocab = CASES[case][3]["vocab_size"]
    return {"input_ids": random_ids(vocab, batch=2, length=8, seed=3, low=3)}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Per case: the base folder, a peft-made adapter folder and the peft model holding it."""
    transformers = pytest.importorskip("transformers")
    out: dict[str, dict[str, Any]] = {}
    for case, (config_cls, model_cls, _auto, config, lora) in CASES.items():
        tmp = tmp_path_factory.mktemp(case)
        base_folder, _ = make_reference_checkpoint(config_cls, model_cls, tmp, **config)
        base = getattr(transformers, model_cls).from_pretrained(str(base_folder), dtype=torch.float32)
        peft_model = peft.get_peft_model(base, peft.LoraConfig(init_lora_weights=False, **lora))
        _perturb(peft_model, 1, _saved_parts(lora))
        peft_model.eval()
        adapter = tmp / "peft-adapter"
        peft_model.save_pretrained(str(adapter))
        out[case] = {"base": base_folder, "adapter": adapter, "peft": peft_model}
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_peft_adapter_loads_here_with_the_same_logits(built: dict[str, dict[str, Any]], case: str) -> None:
    entry = built[case]
    saved = json.loads((entry["adapter"] / "adapter_config.json").read_text())
    assert Path(saved["base_model_name_or_path"]) == entry["base"]
    ours = load_ours(entry["adapter"], CASES[case][2])  # base from base_model_name_or_path, then the adapter
    assert ours.active_adapters() == ["default"]
    inputs = _inputs(case)
    with torch.no_grad():
        expected = entry["peft"](**inputs).logits
        assert_close(ours(**inputs).logits, expected, atol=ATOL)
        ours.disable_adapters()  # the adapter changes the output: the comparison above is not vacuous
        with entry["peft"].disable_adapter():
            base_logits = entry["peft"](**inputs).logits
        assert_close(ours(**inputs).logits, base_logits, atol=ATOL)
        assert (base_logits - expected).abs().max() > 1e-3
        ours.enable_adapters()
        assert_close(ours(**inputs).logits, expected, atol=ATOL)


@pytest.mark.parametrize("case", list(CASES))
def test_our_adapter_loads_in_peft_with_the_same_logits(
    built: dict[str, dict[str, Any]], case: str, tmp_path: Path
) -> None:
    from microformers import LoraConfig

    transformers = pytest.importorskip("transformers")
    _config_cls, model_cls, auto, _config, lora = CASES[case]
    ours = load_ours(built[case]["base"], auto)
    ours.add_adapter(LoraConfig(**lora), adapter_name="mine")
    _perturb(ours, 2, _saved_parts(lora))
    ours.eval()
    ours.save_pretrained(tmp_path / "ours")
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    base = getattr(transformers, model_cls).from_pretrained(str(built[case]["base"]), dtype=torch.float32)
    theirs = peft.PeftModel.from_pretrained(base, str(tmp_path / "ours")).eval()
    from safetensors.torch import load_file

    assert set(load_file(str(tmp_path / "ours" / "adapter_model.safetensors"))) == set(
        load_file(str(built[case]["adapter"] / "adapter_model.safetensors"))
    ), "tensor names differ from the ones peft writes for the same settings"
    inputs = _inputs(case)
    with torch.no_grad():
        assert_close(ours(**inputs).logits, theirs(**inputs).logits, atol=ATOL)


@pytest.mark.parametrize("case", list(CASES))
def test_merged_weights_equal_peft_merge_and_unload(built: dict[str, dict[str, Any]], case: str) -> None:
    import copy

    ours = load_ours(built[case]["adapter"], CASES[case][2])
    inputs = _inputs(case)
    with torch.no_grad():
        unmerged = ours(**inputs).logits
        merged_model = ours.merge_and_unload()
        merged_logits = merged_model(**inputs).logits
    theirs = copy.deepcopy(built[case]["peft"]).merge_and_unload().state_dict()
    mine = merged_model.state_dict()
    assert not any("lora_" in k or "base_layer" in k or "modules_to_save" in k for k in mine)
    common = set(mine) & set(theirs)
    targeted = {k for k in common if any(t in k for t in ("proj", "c_attn", "query", "value", "pooler"))}
    assert targeted, "no adapted weight to compare"
    for key in sorted(common):
        assert_close(mine[key], theirs[key], atol=1e-6, what=key)
    assert_close(merged_logits, unmerged, atol=ATOL)


@pytest.mark.parametrize("case", ["llama-all-linear-lora-bias", "gpt2-conv1d-rslora-bias-all"])
def test_generate_with_an_adapter_gives_the_same_tokens(built: dict[str, dict[str, Any]], case: str) -> None:
    ours = load_ours(built[case]["adapter"], CASES[case][2])
    ids = _inputs(case)["input_ids"]
    settings = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        expected = built[case]["peft"].generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), **settings, **SCORE_OUTPUTS
        )
        got = ours.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **settings, **SCORE_OUTPUTS)
    assert_generation_matches(got, expected, prompt_length=ids.shape[1])


def test_a_peft_lora_config_object_is_accepted(built: dict[str, dict[str, Any]]) -> None:
    ours = load_ours(built["llama-all-linear-lora-bias"]["base"], "AutoModelForCausalLM")
    ours.add_adapter(peft.LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    adapted = {n.rpartition(".lora_A")[0] for n, _ in ours.named_parameters() if ".lora_A." in n}
    assert adapted == {"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj"}


def test_safe_serialization_false_writes_peft_bin_both_ways(built: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    """``save_pretrained(safe_serialization=False)``: ``adapter_model.bin`` here as in peft, readable both ways."""
    from microformers import LoraConfig

    transformers = pytest.importorskip("transformers")
    case = "llama-all-linear-lora-bias"
    _config_cls, model_cls, auto, _config, lora = CASES[case]
    entry = built[case]
    entry["peft"].save_pretrained(str(tmp_path / "peft-bin"), safe_serialization=False)
    assert "adapter_model.bin" in {p.name for p in (tmp_path / "peft-bin").iterdir()}  # and peft's README.md
    assert not (tmp_path / "peft-bin" / "adapter_model.safetensors").exists()
    inputs = _inputs(case)
    with torch.no_grad():
        assert_close(load_ours(tmp_path / "peft-bin", auto)(**inputs).logits, entry["peft"](**inputs).logits, atol=ATOL)
    ours = load_ours(entry["base"], auto)
    ours.add_adapter(LoraConfig(**lora))
    _perturb(ours, 2, _saved_parts(lora))
    ours.eval()
    ours.save_pretrained(tmp_path / "ours-bin", safe_serialization=False)
    assert sorted(p.name for p in (tmp_path / "ours-bin").iterdir()) == ["adapter_config.json", "adapter_model.bin"]
    base = getattr(transformers, model_cls).from_pretrained(str(entry["base"]), dtype=torch.float32)
    theirs = peft.PeftModel.from_pretrained(base, str(tmp_path / "ours-bin")).eval()
    with torch.no_grad():
        assert_close(ours(**inputs).logits, theirs(**inputs).logits, atol=ATOL)

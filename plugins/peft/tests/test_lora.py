"""LoRA through the model's adapter methods: named adapters, files, merging, and every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import microformers
from microformers import AutoModelForCausalLM, LoraConfig, MicroformersError
from microformers_peft.config import AdapterError

LLAMA = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}  # fmt: skip
IDS = torch.tensor([[5, 9, 3, 17, 22, 8], [1, 2, 3, 4, 5, 6]])


def _llama(seed: int = 0) -> microformers.PreTrainedModel:
    from microformers_llama import LlamaConfig

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(LlamaConfig(**LLAMA)).eval()


def _gpt2() -> microformers.PreTrainedModel:
    from microformers_gpt2 import GPT2Config

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4)).eval()


def _randomise_adapter(model: torch.nn.Module, name: str, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, param in model.named_parameters():
            if f".{name}." in key and "lora_" in key:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.2)


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


@pytest.fixture
def base_folder(tmp_path: Path) -> Path:
    model = _llama()
    model.save_pretrained(tmp_path / "base")
    return tmp_path / "base"


def test_a_new_adapter_is_the_identity_and_only_it_trains(capsys: pytest.CaptureFixture[str]) -> None:
    model = _llama()
    before = _logits(model)
    model.add_adapter(LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert model.active_adapters() == ["default"]
    torch.testing.assert_close(_logits(model), before, rtol=0, atol=0)  # exact: lora_B starts at zero, adds 0.0
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A.default." in n or ".lora_B.default." in n for n in trainable)
    assert len(trainable) == 2 * 2 * 2  # 2 layers x (q, v) x (A, B)
    model.print_trainable_parameters()
    lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    assert capsys.readouterr().out.strip() == (
        f"trainable params: {lora:,d} || all params: {total:,d} || trainable%: {100 * lora / total:.4f}"
    )


def test_named_adapters_switch_disable_merge_and_delete() -> None:
    model = _llama()
    base = _logits(model)
    model.add_adapter(LoraConfig(r=4, target_modules="all-linear"), adapter_name="a")
    _randomise_adapter(model, "a", 1)
    only_a = _logits(model)
    model.add_adapter(LoraConfig(r=2, lora_alpha=4, target_modules=["o_proj", "down_proj"]), adapter_name="b")
    _randomise_adapter(model, "b", 2)
    assert model.active_adapters() == ["b"]
    only_b = _logits(model)
    assert (only_a - base).abs().max() > 1e-3 and (only_b - only_a).abs().max() > 1e-3
    model.set_adapter("a")
    torch.testing.assert_close(_logits(model), only_a)
    model.set_adapter(["a", "b"])
    both = _logits(model)
    weight = model.model.layers[0].self_attn.o_proj.base_layer.weight.clone()
    model.merge_adapter()
    torch.testing.assert_close(_logits(model), both, atol=1e-5, rtol=0)
    assert not torch.equal(model.model.layers[0].self_attn.o_proj.base_layer.weight, weight)
    model.unmerge_adapter()
    torch.testing.assert_close(model.model.layers[0].self_attn.o_proj.base_layer.weight, weight, atol=1e-6, rtol=0)
    model.disable_adapters()
    torch.testing.assert_close(_logits(model), base)
    model.enable_adapters()
    torch.testing.assert_close(_logits(model), both)
    model.delete_adapter("b")
    assert model.active_adapters() == ["a"]
    torch.testing.assert_close(_logits(model), only_a)
    assert "lm_head" not in {n.rpartition(".")[0] for n, _ in model.named_parameters() if "lora_" in n}
    assert not any(".b." in n for n, _ in model.named_parameters())
    plain = model.merge_and_unload()
    assert plain is model and not any("lora_" in n or "base_layer" in n for n in model.state_dict())
    torch.testing.assert_close(_logits(model), only_a, atol=1e-5, rtol=0)
    with pytest.raises(microformers.ConfigError, match="No adapter loaded"):
        model.active_adapters()


def test_save_writes_adapter_files_that_load_back_through_auto(base_folder: Path, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(base_folder)
    model.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules=r".*\.mlp\.(gate|up)_proj", use_rslora=True))
    _randomise_adapter(model, "default", 3)
    expected = _logits(model)
    state = model.get_adapter_state_dict()
    assert sorted(state)[0] == "model.layers.0.mlp.gate_proj.lora_A.weight"
    model.save_pretrained(tmp_path / "adapter")
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["base_model_name_or_path"] == str(base_folder)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "adapter")
    torch.testing.assert_close(_logits(loaded), expected, atol=1e-6, rtol=0)
    assert not any(p.requires_grad for p in loaded.parameters())  # loaded for inference unless is_trainable
    fresh = AutoModelForCausalLM.from_pretrained(base_folder)
    fresh.load_adapter(tmp_path / "adapter", adapter_name="x", is_trainable=True)
    assert fresh.active_adapters() == ["x"] and any(p.requires_grad for p in fresh.parameters())
    torch.testing.assert_close(_logits(fresh), expected, atol=1e-6, rtol=0)
    fresh.save_pretrained(base_folder)  # adapter files beside a full model: that folder is the base
    assert (base_folder / "model.safetensors").is_file() and (base_folder / "adapter_config.json").is_file()
    both = AutoModelForCausalLM.from_pretrained(base_folder, adapter_name="y")
    assert both.active_adapters() == ["y"]
    torch.testing.assert_close(_logits(both), expected, atol=1e-6, rtol=0)


def test_colliding_adapter_names_are_refused(tmp_path: Path) -> None:
    model = _llama()
    model.add_adapter(LoraConfig(target_modules=["q_proj"]))
    with pytest.raises(AdapterError, match="'default' already exists"):
        model.add_adapter(LoraConfig(target_modules=["k_proj"]))
    model.save_pretrained(tmp_path / "a")
    with pytest.raises(AdapterError, match="'default' already exists"):
        model.load_adapter(tmp_path / "a")
    with pytest.raises(AdapterError, match="no adapter named 'nope'"):
        model.set_adapter("nope")


def test_target_modules_matching_nothing_lists_the_linear_modules() -> None:
    model = _llama()
    with pytest.raises(AdapterError, match=r"matches no module.*q_proj.*gate_proj") as info:
        model.add_adapter(LoraConfig(target_modules=["query", "value"]))
    assert "model.layers.0.self_attn.q_proj" in str(info.value)
    with pytest.raises(AdapterError, match="'model.layers.0.input_layernorm', a RMSNorm"):
        model.add_adapter(LoraConfig(target_modules=["input_layernorm"]))


def test_rank_mismatch_names_the_tensor(base_folder: Path, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(base_folder)
    model.add_adapter(LoraConfig(r=4, target_modules=["q_proj"]))
    model.save_pretrained(tmp_path / "adapter")
    config_path = tmp_path / "adapter" / "adapter_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "r": 2}))
    with pytest.raises(AdapterError, match=r"'base_model\.model\.model\.layers\.0\.self_attn\.q_proj\.lora_A\.weight'"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "adapter")


def test_adapter_for_another_architecture_is_refused(tmp_path: Path) -> None:
    llama = _llama()
    llama.add_adapter(LoraConfig(target_modules="all-linear"))
    llama.save_pretrained(tmp_path / "llama-adapter")
    gpt2 = _gpt2()
    with pytest.raises(AdapterError, match=r"matches no module of GPT2LMHeadModel.*c_attn"):
        gpt2.load_adapter(tmp_path / "llama-adapter")
    # same module names, other sizes: the shape check names the tensor
    wide = AutoModelForCausalLM.from_config(type(llama.config)(**{**LLAMA, "hidden_size": 64}))
    with pytest.raises(AdapterError, match=r"tensor 'base_model\.model\.model\.layers\.0\..*' has shape"):
        wide.load_adapter(tmp_path / "llama-adapter")
    assert not any("lora_" in n for n in wide.state_dict())  # a failed load leaves the model as it was


def test_unknown_peft_type_and_unsupported_settings(tmp_path: Path) -> None:
    model = _llama()
    folder = tmp_path / "ia3"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3", "target_modules": ["k_proj"]}))
    with pytest.raises(MicroformersError, match=r"'IA3'.*Installed: LORA"):
        model.load_adapter(folder)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "use_dora": True}))
    with pytest.raises(microformers.ConfigError, match=r"use_dora=True is not supported"):
        model.load_adapter(folder)
    with pytest.raises(microformers.ConfigError, match="bias='some'"):
        LoraConfig(bias="some")
    with pytest.raises(microformers.ConfigError, match="rank must be a positive integer"):
        LoraConfig(r=0)


def test_without_the_plugin_the_error_names_the_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    from microformers.plugins import registry

    registry.discover()
    entries = {key: value for key, value in registry._entries.items() if key[0] != "adapters"}
    monkeypatch.setattr(registry, "_entries", entries)
    model = _llama()
    with pytest.raises(microformers.PluginError, match="pip install microformers-peft"):
        model.add_adapter(LoraConfig(target_modules=["q_proj"]))
    with pytest.raises(microformers.PluginError, match="pip install microformers-peft"):
        model.set_adapter("default")


def test_gpt2_conv1d_sets_fan_in_fan_out_and_merges(tmp_path: Path) -> None:
    model = _gpt2()
    model.add_adapter(LoraConfig(r=4, target_modules=["c_attn", "c_fc"], lora_dropout=0.1))
    _randomise_adapter(model, "default", 4)
    expected = _logits(model)
    model.save_pretrained(tmp_path / "g")
    assert json.loads((tmp_path / "g" / "adapter_config.json").read_text())["fan_in_fan_out"] is True
    model.merge_and_unload()
    torch.testing.assert_close(_logits(model), expected, atol=1e-5, rtol=0)


def test_save_keywords_work_or_are_refused(base_folder: Path, tmp_path: Path) -> None:
    """Every keyword save_pretrained accepts on a model with an adapter does something, or raises naming it."""
    from microformers import PeftConfig

    model = AutoModelForCausalLM.from_pretrained(base_folder)
    model.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    _randomise_adapter(model, "default", 5)
    expected = _logits(model)
    out = tmp_path / "adapter"
    model.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=False)  # peft's legacy file, replacing the safetensors one
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.bin"]
    assert all(k.startswith("base_model.model.") for k in torch.load(out / "adapter_model.bin", weights_only=True))
    torch.testing.assert_close(_logits(AutoModelForCausalLM.from_pretrained(out)), expected, atol=1e-6, rtol=0)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir())
    for bad, named in (({"max_shard_size": 100}, "max_shard_size"), ({"variant": "fp16"}, "variant"),
                       ({"safe_serialisation": False}, "safe_serialisation"), ({"push_to_hub": True}, "push_to_hub")):  # fmt: skip
        with pytest.raises(MicroformersError, match=named):
            model.save_pretrained(out, **bad)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) == before  # a refused save writes nothing
    model.save_pretrained(out, max_shard_size="1MB", save_peft_format=False, token="unused-without-upload")
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    from safetensors.torch import load_file

    assert (
        sorted(load_file(str(out / "adapter_model.safetensors")))[0] == "model.layers.0.self_attn.q_proj.lora_A.weight"
    )
    config = PeftConfig.from_pretrained(tmp_path, subfolder="adapter")
    assert config.r == 4
    with pytest.raises(MicroformersError, match="revison"):
        PeftConfig.from_pretrained(out, revison="main")
    with pytest.raises(MicroformersError, match="indent"):
        config.save_pretrained(tmp_path / "c", indent=2)


def test_load_adapter_refuses_placement_arguments_it_would_ignore(base_folder: Path, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(base_folder)
    model.add_adapter(LoraConfig(r=2, target_modules=["q_proj"]))
    model.save_pretrained(tmp_path / "adapter")
    fresh = AutoModelForCausalLM.from_pretrained(base_folder)
    for bad in ({"device_map": "cpu"}, {"dtype": torch.bfloat16}, {"torch_dtype": "float16"}):
        with pytest.raises(MicroformersError, match=next(iter(bad))):
            fresh.load_adapter(tmp_path / "adapter", **bad)
    assert not fresh.__dict__.get("_adapter_manager") or not fresh.active_adapters()
    fresh.load_adapter(tmp_path / "adapter", device_map=None, low_cpu_mem_usage=True, local_files_only=True)
    assert fresh.active_adapters() == ["default"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"target_modules": r"((\w|\w\w|\.)+)+y"}, r"target_modules .* takes over 0.01 s to match the module path"),
        ({"target_modules": ["q_proj"], "exclude_modules": r"((\w|\w\w|\.)+)+y"}, r"exclude_modules .* takes over"),
        ({"target_modules": r"(q_proj"}, r"target_modules '\(q_proj' is not a valid regular expression"),
        ({"target_modules": ["q_proj"], "rank_pattern": {"(q_proj": 2}}, r"rank_pattern key .* not a valid regular"),
    ],
)
def test_runaway_or_broken_patterns_from_an_adapter_config_are_clear_errors(
    settings: dict[str, object], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from microformers_peft import lora

    # nested repetition backtracks exponentially: ~2 s on a 30-character module path here, 200x the bound
    monkeypatch.setattr(lora, "PATTERN_TIMEOUT", 0.01)
    with pytest.raises(MicroformersError, match=message):
        _llama().add_adapter(LoraConfig(r=2, **settings))


def test_patterns_that_only_look_dangerous_still_match_fast() -> None:
    model = _llama()
    model.add_adapter(LoraConfig(r=2, target_modules=r"(.*)*q_proj"))  # nested stars: no runaway in this engine
    assert sum(".lora_A.default." in name for name, _ in model.named_parameters()) == 2


@pytest.mark.parametrize("damage", [{"r": 10**9}, {"rank_pattern": {"q_proj": 10**9}}])
def test_a_damaged_rank_is_refused_before_any_lora_matrix_is_built(tmp_path: Path, damage: dict[str, object]) -> None:
    llama = _llama()
    llama.add_adapter(LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    llama.save_pretrained(tmp_path / "adapter")
    config_file = tmp_path / "adapter" / "adapter_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **damage}))
    fresh = _llama()
    with pytest.raises(AdapterError, match=r"ask for rank 1000000000, but the adapter weights hold ranks up to 4"):
        fresh.load_adapter(tmp_path / "adapter")  # a 10**9-row matrix per layer would be tried first otherwise
    assert not any("lora_" in n for n in fresh.state_dict())

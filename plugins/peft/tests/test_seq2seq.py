"""LoRA on encoder-decoder models (T5/mT5, BART/mBART, Marian), ``task_type="SEQ_2_SEQ_LM"``.

Default targets per model type (both stacks, self- and cross-attention), training on a copy task with only
the adapter trainable, files and reloading, ``generate`` / ``get_encoder`` through the adapter, merging, and
peft's rules for long target lists (condensed to suffixes) and ``modules_to_save`` (suffix match).
Parity with the ``peft`` library itself: tests/parity/test_peft_seq2seq_parity.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoModelForSeq2SeqLM, LoraConfig
from microformers_sdk.testing import assert_close

T5 = {"vocab_size": 48, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4,
      "relative_attention_num_buckets": 8, "relative_attention_max_distance": 20, "decoder_start_token_id": 0,
      "pad_token_id": 0, "eos_token_id": 1}  # fmt: skip
BART = {"vocab_size": 48, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48, "max_position_embeddings": 64,
        "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2, "forced_eos_token_id": None}  # fmt: skip

# model_type -> (plugin, config class, config)
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "t5": ("microformers_t5", "T5Config", T5),
    "mt5": ("microformers_t5", "MT5Config", T5),
    "bart": ("microformers_bart", "BartConfig", BART),
    "mbart": ("microformers_bart", "MBartConfig", BART),
    "marian": ("microformers_marian", "MarianConfig", {**BART, "pad_token_id": 47, "decoder_start_token_id": 47}),
}
IDS = torch.tensor([[5, 9, 3, 17, 22, 8, 30], [11, 12, 13, 14, 15, 16, 17]])
LABELS = torch.tensor([[7, 8, 9, 10], [20, 21, -100, -100]])


def _model(model_type: str, seed: int = 0) -> Any:
    plugin, config_cls, config = MODELS[model_type]
    module = pytest.importorskip(plugin, reason=f"{plugin.replace('_', '-')} provides {model_type}")
    torch.manual_seed(seed)
    return AutoModelForSeq2SeqLM.from_config(getattr(module, config_cls)(**config)).eval()


def _adapted(model: torch.nn.Module) -> set[str]:
    return {n.rpartition(".lora_A")[0] for n, _ in model.named_parameters() if ".lora_A." in n}


def _randomise_adapter(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, param in model.named_parameters():
            if "lora_" in key:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.2)


@pytest.mark.parametrize("model_type", list(MODELS))
def test_default_targets_are_peft_s_in_both_stacks(model_type: str) -> None:
    model = _model(model_type)
    model.add_adapter(LoraConfig(task_type="SEQ_2_SEQ_LM"))
    names = ("q", "v") if model_type in ("t5", "mt5") else ("q_proj", "v_proj")
    expected = {p for p, m in model.named_modules() if p.rpartition(".")[2] in names and ".lora_" not in p}
    assert _adapted(model) == expected
    # encoder self-attention, decoder self-attention and cross-attention: 2 + 2 * 2 layers, two projections each
    assert len(expected) == 12
    cross = "EncDecAttention" if model_type in ("t5", "mt5") else "encoder_attn"
    assert any(cross in p for p in expected) and any(p.startswith(("encoder.", "model.encoder.")) for p in expected)
    config = model._adapter_manager.configs["default"]
    assert config.target_modules == list(names) and config.task_type == "SEQ_2_SEQ_LM"


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_a_few_steps_on_a_copy_task_lower_the_loss_and_train_only_the_adapter(model_type: str) -> None:
    model = _model(model_type)
    model.add_adapter(LoraConfig(r=8, lora_alpha=16, task_type="SEQ_2_SEQ_LM", target_modules="all-linear"))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A.default." in n or ".lora_B.default." in n for n in trainable)
    frozen = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(3, 40, (8, 6), generator=generator)
    batch = {"input_ids": source, "attention_mask": torch.ones_like(source), "labels": source.clone()}  # copy
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-2)
    model.train()
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3, losses
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in frozen.items()), "a base weight changed"  # exact: frozen


@pytest.mark.parametrize("model_type", ["t5", "bart", "marian"])
def test_saved_adapter_reloads_and_generate_get_encoder_merge_go_through_it(model_type: str, tmp_path: Path) -> None:
    model = _model(model_type)
    model.save_pretrained(tmp_path / "base")
    base = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base").eval()
    inputs = {"input_ids": IDS, "attention_mask": torch.ones_like(IDS), "labels": LABELS}
    with torch.no_grad():
        base_logits = base(**inputs).logits
        base_encoded = base.get_encoder()(input_ids=IDS).last_hidden_state
    base.add_adapter(LoraConfig(r=4, task_type="SEQ_2_SEQ_LM"))
    _randomise_adapter(base, 1)
    base.eval()
    base.save_pretrained(tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["task_type"] == "SEQ_2_SEQ_LM" and saved["base_model_name_or_path"] == str(tmp_path / "base")
    from safetensors.torch import load_file

    keys = set(load_file(str(tmp_path / "adapter" / "adapter_model.safetensors")))
    first = (
        "encoder.block.0.layer.0.SelfAttention.q" if model_type == "t5" else "model.encoder.layers.0.self_attn.q_proj"
    )
    assert f"base_model.model.{first}.lora_A.weight" in keys and len(keys) == 24

    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "adapter")  # base, then the adapter
    decoder_inputs = {"input_ids": IDS, "decoder_input_ids": LABELS.clamp(min=0)}
    with torch.no_grad():
        want = base(**inputs)
        got = loaded(**inputs)
        assert_close(got.logits, want.logits, atol=1e-6)
        assert_close(got.loss, want.loss, atol=1e-6)
        assert (got.logits - base_logits).abs().max() > 1e-3  # the adapter does something
        assert_close(loaded(**decoder_inputs).logits, base(**decoder_inputs).logits, atol=1e-6)
        encoded = loaded.get_encoder()(input_ids=IDS).last_hidden_state
        assert (encoded - base_encoded).abs().max() > 1e-4  # the encoder's adapters run through get_encoder()
        assert_close(encoded, base.get_encoder()(input_ids=IDS).last_hidden_state, atol=1e-6)
        settings = {"max_new_tokens": 5, "min_new_tokens": 5, "do_sample": False}
        generated = loaded.generate(input_ids=IDS, num_beams=2, **settings)
        assert torch.equal(generated, base.generate(input_ids=IDS, num_beams=2, **settings))
        loaded.disable_adapters()
        assert_close(loaded(**inputs).logits, base_logits, atol=1e-6)
        loaded.enable_adapters()
        merged = loaded.merge_and_unload()
        assert not any("lora_" in k or "base_layer" in k for k in merged.state_dict())
        assert_close(merged(**inputs).logits, want.logits, atol=1e-5)


def test_a_long_target_list_is_condensed_as_peft_condenses_it(tmp_path: Path) -> None:
    """peft writes a target list of 20+ modules as the fewest suffixes that select the same modules."""
    model = _model("t5")
    model.add_adapter(LoraConfig(r=2, target_modules="all-linear"))  # 2 * 6 + 2 * 10 linear layers, lm_head aside
    chosen = _adapted(model)
    assert len(chosen) == 32 and "lm_head" not in chosen
    assert model._adapter_manager.configs["default"].target_modules == ["k", "o", "q", "v", "wi", "wo"]
    model.save_pretrained(tmp_path / "adapter")
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["target_modules"] == [
        "k", "o", "q", "v", "wi", "wo"]  # fmt: skip
    reloaded = _model("t5")
    reloaded.load_adapter(tmp_path / "adapter")
    assert _adapted(reloaded) == chosen

    # a list that only full paths separate from the rest stays as it is
    model = _model("t5")
    targets = [p for p in sorted(_adapted_paths(model)) if p.startswith("decoder.") and p.endswith((".q", ".k", ".v"))]
    assert len(targets) == 12
    model.add_adapter(LoraConfig(r=2, target_modules=targets))
    assert model._adapter_manager.configs["default"].target_modules == targets
    # the decoder's 20 linear layers: the encoder's share the short suffixes of its self-attention, so those
    # stay full paths; cross-attention and feed-forward ones have suffixes of their own
    model = _model("t5")
    targets = [p for p in sorted(_adapted_paths(model)) if p.startswith("decoder.")]
    assert len(targets) == 20
    model.add_adapter(LoraConfig(r=2, target_modules=targets))
    written = model._adapter_manager.configs["default"].target_modules
    assert _adapted(model) == set(targets)
    assert "EncDecAttention.q" in written and "decoder.block.1.layer.0.SelfAttention.q" in written
    assert "2.DenseReluDense.wi" in written and len(written) == 14


def _adapted_paths(model: torch.nn.Module) -> list[str]:
    return [p for p, m in model.named_modules() if isinstance(m, torch.nn.Linear) and p != "lm_head"]


def test_modules_to_save_match_by_suffix_as_in_peft(tmp_path: Path) -> None:
    """``modules_to_save=["layer_norm"]`` takes every module whose path ends so (``self_attn_layer_norm`` too)."""
    model = _model("bart")
    model.add_adapter(LoraConfig(r=2, task_type="SEQ_2_SEQ_LM", modules_to_save=["layer_norm"]))
    wrapped = {n.partition(".modules_to_save.")[0] for n, _ in model.named_parameters() if ".modules_to_save." in n}
    assert (
        "model.encoder.layers.0.self_attn_layer_norm" in wrapped
        and "model.decoder.layers.1.final_layer_norm" in wrapped
    )
    assert not any(w.endswith("layernorm_embedding") for w in wrapped)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(".modules_to_save.default." in n for n in trainable)
    _randomise_adapter(model, 2)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".modules_to_save." in name:
                param.add_(0.1)
    model.eval()
    model.save_pretrained(tmp_path / "adapter")
    reloaded = _model("bart")
    reloaded.load_adapter(tmp_path / "adapter")
    with torch.no_grad():
        assert_close(reloaded(input_ids=IDS).logits, model(input_ids=IDS).logits, atol=1e-6)

"""microformers-gpt2 on its own (no reference implementation): registration, configs, weights, cache, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from microformers import AutoConfig, AutoModel, AutoModelForCausalLM, registry
from microformers.errors import ConfigError, InputError
from microformers_gpt2.configuration_gpt2 import GPT2Config
from microformers_gpt2.modeling_gpt2 import (
    Conv1D,
    GPT2ForSequenceClassification,
    GPT2InputError,
    GPT2LMHeadModel,
    GPT2Model,
)
from microformers_sdk.cache import DynamicCache

TINY: dict[str, Any] = {"vocab_size": 50, "n_embd": 16, "n_layer": 2, "n_head": 2, "n_positions": 12}


def tiny(cls: type = GPT2LMHeadModel, **overrides: Any) -> Any:
    torch.manual_seed(0)
    return cls(GPT2Config(**{**TINY, **overrides})).eval()


def test_plugin_registers_heads() -> None:
    assert registry.get("configs", "gpt2").plugin == "gpt2"
    for auto, name in (
        ("AutoModel", "GPT2Model"),
        ("AutoModelForCausalLM", "GPT2LMHeadModel"),
        ("AutoModelForSequenceClassification", "GPT2ForSequenceClassification"),
    ):
        assert registry.require("models", ("gpt2", auto)).__name__ == name


def test_config_common_names_map_to_gpt2_names() -> None:
    config = GPT2Config(hidden_size=24, num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=20)
    assert (config.n_embd, config.n_layer, config.n_head, config.n_positions) == (24, 3, 4, 20)
    assert config.hidden_size == 24
    saved = config.to_dict()
    assert saved["n_embd"] == 24 and "hidden_size" not in saved


def test_conv1d_stores_weights_in_checkpoint_layout() -> None:
    layer = Conv1D(out_features=6, in_features=4)
    assert layer.weight.shape == (4, 6)
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(layer(x), x @ layer.weight + layer.bias)


def test_save_load_keeps_checkpoint_names_and_tied_head(tmp_path: Path) -> None:
    model = tiny()
    model.save_pretrained(tmp_path)
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert "lm_head.weight" not in saved
    assert saved["transformer.h.0.attn.c_attn.weight"].shape == (16, 48)
    assert saved["transformer.h.0.mlp.c_fc.weight"].shape == (16, 64)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "gpt2"
    assert (tmp_path / "generation_config.json").is_file()
    assert isinstance(AutoConfig.from_pretrained(tmp_path), GPT2Config)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.lm_head.weight is reloaded.transformer.wte.weight
    base = AutoModel.from_pretrained(tmp_path)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        torch.testing.assert_close(base(ids).last_hidden_state, model.transformer(ids).last_hidden_state)


def test_legacy_tuple_cache_and_dynamic_cache_agree() -> None:
    model = tiny()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        first = model(ids[:, :3], use_cache=True)
        legacy = tuple((k.clone(), v.clone()) for k, v in first.past_key_values)
        via_cache = model(ids[:, 3:], past_key_values=first.past_key_values).logits
        via_tuple = model(ids[:, 3:], past_key_values=legacy).logits
        full = model(ids).logits[:, 3:]
    torch.testing.assert_close(via_cache, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(via_tuple, full, atol=1e-5, rtol=0)
    assert model(ids, use_cache=False).past_key_values is None
    assert isinstance(model(ids, use_cache=True).past_key_values, DynamicCache)


def test_logits_to_keep_and_labels() -> None:
    model = tiny()
    ids = torch.tensor([[5, 6, 7, 8]])
    full = model(ids).logits
    torch.testing.assert_close(model(ids, logits_to_keep=1).logits, full[:, -1:])
    loss = model(ids, labels=ids).loss
    want = torch.nn.functional.cross_entropy(full[0, :-1], ids[0, 1:])
    torch.testing.assert_close(loss, want)


def test_sequence_classification_pools_last_real_token() -> None:
    model = tiny(GPT2ForSequenceClassification, num_labels=2, pad_token_id=0)
    ids = torch.tensor([[5, 6, 7, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    with torch.no_grad():
        padded = model(ids, attention_mask=mask).logits
        alone = model(ids[:, :3]).logits
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"n_embd": 15}, "not a multiple of n_head"), ({"n_layer": -1}, "n_layer")],
)
def test_bad_configs_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GPT2Config(**{**TINY, **overrides})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"add_cross_attention": True}, "add_cross_attention"),
        ({"activation_function": "mystery"}, "activation_function"),
    ],
)
def test_unsupported_model_settings_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GPT2Model(GPT2Config(**{**TINY, **overrides}))


def test_bad_inputs_raise_input_errors() -> None:
    model = tiny()
    with pytest.raises(InputError, match="exactly one of"):
        model()
    with pytest.raises(GPT2InputError, match="n_positions"):
        model(torch.ones(1, 13, dtype=torch.long))
    with pytest.raises(InputError, match="past_key_values must be"):
        model(torch.ones(1, 2, dtype=torch.long), past_key_values="not a cache")
    classifier = tiny(GPT2ForSequenceClassification)
    with pytest.raises(GPT2InputError, match="pad_token_id"):
        classifier(torch.ones(2, 3, dtype=torch.long))

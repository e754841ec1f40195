"""microformers-llama on its own (no reference implementation): registration, configs, loading, errors, caches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from microformers import AutoConfig, AutoModel, AutoModelForCausalLM, registry
from microformers.errors import (
    CheckpointError,
    ConfigError,
    GenerationError,
    InputError,
    MicroformersError,
    PluginError,
)
from microformers_llama.configuration_llama import LlamaConfig
from microformers_llama.configuration_mistral import MistralConfig
from microformers_llama.configuration_qwen2 import Qwen2Config
from microformers_llama.modeling_llama import LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel
from microformers_llama.modeling_qwen2 import Qwen2ForCausalLM
from microformers_sdk.cache import DynamicCache, StaticCache

TINY: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


def tiny_model(cls: type = LlamaForCausalLM, config_cls: type = LlamaConfig, **overrides: Any) -> Any:
    torch.manual_seed(0)
    return cls(config_cls(**{**TINY, **overrides})).eval()


def test_plugin_registers_all_three_families() -> None:
    for model_type, prefix in (("llama", "Llama"), ("mistral", "Mistral"), ("qwen2", "Qwen2")):
        assert registry.get("configs", model_type).plugin == "llama"
        assert registry.require("configs", model_type).model_type == model_type
        for auto, suffix in (("AutoModel", "Model"), ("AutoModelForCausalLM", "ForCausalLM")):
            assert registry.require("models", (model_type, auto)).__name__ == prefix + suffix
        assert registry.get("architectures", f"{prefix}ForCausalLM") is not None
        assert registry.get("architectures", f"{prefix}ForSequenceClassification") is not None


def test_variant_layouts() -> None:
    qwen = Qwen2Config(**TINY, use_sliding_window=True, sliding_window=8, max_window_layers=2)
    assert [qwen.layer_sliding_window(i) for i in range(3)] == [None, None, 8]
    assert Qwen2Config(**TINY).sliding_window is None  # stored as null without use_sliding_window
    model = Qwen2ForCausalLM(Qwen2Config(**TINY))
    attention = model.model.layers[0].self_attn
    assert attention.q_proj.bias is not None and attention.o_proj.bias is None
    mistral = MistralConfig(**TINY, sliding_window=5)
    assert {mistral.layer_sliding_window(i) for i in range(3)} == {5}
    assert LlamaConfig(**TINY).layer_sliding_window(0) is None


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"hidden_size": 30}, ["hidden_size=30", "num_attention_heads=4"]),
        ({"num_key_value_heads": 3}, ["num_key_value_heads=3", "num_attention_heads=4"]),
        ({"num_hidden_layers": 0}, ["num_hidden_layers=0"]),
        ({"rope_scaling": {"rope_type": "banana", "factor": 2.0}}, ["rope_scaling.rope_type='banana'"]),
        ({"rope_scaling": {"rope_type": "linear"}}, ["rope_scaling", "factor"]),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, ["low_freq_factor", "high_freq_factor"]),
    ],
)
def test_bad_config_names_the_setting(overrides: dict[str, Any], names: list[str]) -> None:
    with pytest.raises(ConfigError) as excinfo:
        LlamaConfig(**{**TINY, **overrides})
    for name in names:
        assert name in str(excinfo.value)


def test_bad_config_file_fails_on_load_naming_the_setting(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **TINY, "hidden_size": 30}))
    with pytest.raises(ConfigError, match="num_attention_heads"):
        AutoConfig.from_pretrained(tmp_path)


def test_explicit_head_dim_need_not_divide_hidden_size() -> None:
    config = LlamaConfig(**{**TINY, "hidden_size": 30, "head_dim": 8})
    model = LlamaForCausalLM(config)
    assert model.model.layers[0].self_attn.q_proj.weight.shape == (32, 30)


def test_rope_parameters_spelling_is_equivalent() -> None:
    legacy = LlamaConfig(**TINY, rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0})
    current = LlamaConfig(**TINY, rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0})
    assert current.rope_theta == 5e5 and current.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert (
        current.rope_parameters == legacy.rope_parameters == {"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0}
    )
    ids = torch.randint(0, 64, (1, 12))
    with torch.no_grad():
        a = tiny_model(**{"rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 2.0}})(ids).logits
        b = tiny_model(rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0})(ids).logits
        c = tiny_model(rope_theta=5e5)(ids).logits
    assert torch.equal(a, b)  # exact: the same weights and rotary tables on the same eager path and shapes
    assert not torch.allclose(a, c, atol=1e-4)  # the scaling is actually applied
    plain = LlamaConfig(**TINY, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    assert plain.rope_scaling is None and plain.rope_theta == 1e6


def test_save_and_load_round_trip_keeps_tied_weights(tmp_path: Path) -> None:
    model = tiny_model(tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in stored and "model.embed_tokens.weight" in stored
    assert "model.layers.2.self_attn.q_proj.weight" in stored
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert isinstance(loaded, LlamaForCausalLM)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    ids = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)  # exact: a save/load copy, the same path


def test_checkpoint_missing_a_layer_names_the_tensor(tmp_path: Path) -> None:
    tiny_model().save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    kept = {k: v for k, v in weights.items() if not k.startswith("model.layers.1.")}
    save_file(kept, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"model\.layers\.1\.") as excinfo:
        AutoModelForCausalLM.from_pretrained(tmp_path)
    assert "model.layers.1.self_attn.q_proj.weight" in str(excinfo.value)


def test_base_model_loads_from_causal_lm_checkpoint(tmp_path: Path) -> None:
    model = tiny_model()
    model.save_pretrained(tmp_path)
    base = AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, LlamaModel)
    ids = torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        # exact: a save/load copy of the same decoder on the same eager path and shapes
        assert torch.equal(base(ids).last_hidden_state, model.model(ids).last_hidden_state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dtype_on_load(tmp_path: Path, dtype: torch.dtype) -> None:
    tiny_model().save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype)
    assert {p.dtype for p in model.parameters()} == {dtype}
    out = model(torch.randint(0, 64, (2, 6)), attention_mask=torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6]))
    assert out.logits.dtype == dtype and torch.isfinite(out.logits).all()


def test_eager_and_sdpa_agree_and_unknown_implementation_is_named() -> None:
    model = tiny_model()
    ids = torch.randint(1, 64, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    with torch.no_grad():
        sdpa = model(ids, attention_mask=mask).logits
        model.config._attn_implementation = "eager"
        eager = model(ids, attention_mask=mask).logits
        model.config._attn_implementation = "no-such-kernel"
        with pytest.raises(MicroformersError, match="no-such-kernel"):
            model(ids)
    assert torch.allclose(sdpa[mask.bool()], eager[mask.bool()], atol=1e-5)


def test_plugin_attention_implementation_is_used() -> None:
    from microformers_sdk.attention import sdpa_attention

    calls: list[int] = []

    def counting_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Any, **kw: Any) -> Any:
        calls.append(query.shape[2])
        return sdpa_attention(query, key, value, mask, **kw)

    registry.add("attention", "counting-test", counting_attention)
    model = tiny_model()
    model.config._attn_implementation = "counting-test"
    with torch.no_grad():
        model(torch.randint(0, 64, (1, 4)))
    assert calls == [4, 4, 4]


def test_cache_forms_and_use_cache_flag() -> None:
    model = tiny_model()
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        full = model(ids).logits
        no_cache = model(ids[:, :5], use_cache=False)
        assert no_cache.past_key_values is None
        first = model(ids[:, :5], use_cache=True)
        assert isinstance(first.past_key_values, DynamicCache) and first.past_key_values.get_seq_length() == 5
        legacy = first.past_key_values.to_legacy_cache()
        assert len(legacy) == 3 and legacy[0][0].shape == (2, 2, 5, 8)
        rest = model(ids[:, 5:], past_key_values=legacy).logits  # a tuple cache is accepted, chunked prefill
    assert torch.allclose(torch.cat([first.logits, rest], dim=1), full, atol=1e-5)
    with pytest.raises(InputError, match="past_key_values"):
        model(ids, past_key_values="nope")
    with pytest.raises(InputError, match="exactly one of input_ids or inputs_embeds"):
        model()


def test_static_cache_overflow_is_a_clear_error() -> None:
    model = tiny_model()
    cache = StaticCache(max_cache_len=6)
    with torch.no_grad():
        model(torch.randint(0, 64, (1, 5)), past_key_values=cache)
        with pytest.raises(GenerationError, match="max_cache_len"):
            model(torch.randint(0, 64, (1, 2)), past_key_values=cache)


def test_logits_to_keep_and_return_dict() -> None:
    model = tiny_model()
    ids = torch.randint(0, 64, (2, 6))
    with torch.no_grad():
        full = model(ids).logits
        last = model(ids, logits_to_keep=1).logits
        as_tuple = model(ids, return_dict=False, use_cache=False)
    assert last.shape == (2, 1, 64) and torch.allclose(last, full[:, -1:], atol=1e-6)
    # exact: the same eager path and shapes; only the container (and the cache left unbuilt) differ
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], full)


def test_causal_lm_loss_is_next_token_cross_entropy() -> None:
    model = tiny_model()
    ids = torch.randint(0, 64, (2, 6))
    with torch.no_grad():
        out = model(ids, labels=ids)
    expected = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 64), ids[:, 1:].reshape(-1))
    assert torch.allclose(out.loss, expected, atol=1e-6)


def test_sequence_classification_needs_pad_token_for_batches() -> None:
    model = tiny_model(LlamaForSequenceClassification, num_labels=3)
    with torch.no_grad():
        assert model(torch.randint(1, 64, (1, 5))).logits.shape == (1, 3)
        with pytest.raises(InputError, match="pad_token_id"):
            model(torch.randint(1, 64, (2, 5)))
        model.config.pad_token_id = 0
        ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
        logits = model(ids).logits
        alone = model(ids[:1, :3]).logits
    assert torch.allclose(logits[0], alone[0], atol=1e-5)


def test_missing_plugin_error_says_to_install_microformers_llama(tmp_path: Path) -> None:
    tiny_model().save_pretrained(tmp_path)
    # A fresh interpreter in which the "llama" entry point is filtered out, as if the plugin were uninstalled.
    script = textwrap.dedent(
        f"""
        import importlib.metadata as md
        original = md.entry_points
        def without_llama(**kwargs):
            found = original(**kwargs)
            if kwargs.get("group") == "microformers":
                return md.EntryPoints([ep for ep in found if ep.name != "llama"])
            return found
        md.entry_points = without_llama
        from microformers import AutoModelForCausalLM
        try:
            AutoModelForCausalLM.from_pretrained({str(tmp_path)!r})
        except Exception as exc:
            print(type(exc).__name__, exc)
        else:
            print("LOADED")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env={**os.environ}
    )
    assert result.returncode == 0, result.stderr
    assert "LOADED" not in result.stdout
    assert result.stdout.startswith(PluginError.__name__), result.stdout
    assert "pip install microformers-llama" in result.stdout
    assert "'llama'" in result.stdout

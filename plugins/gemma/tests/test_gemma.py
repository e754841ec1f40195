"""Gemma configs (defaults, older spellings, bad files refused naming field and file) and model behaviour the
conformance kit does not cover: soft-capping limits, sliding windows while decoding, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from microformers import AutoConfig, AutoModelForCausalLM
from microformers.errors import ConfigError, GenerationError
from microformers_gemma.configuration_gemma2 import Gemma2Config
from microformers_gemma.configuration_gemma3 import Gemma3TextConfig
from microformers_gemma.modeling_gemma2 import Gemma2ForCausalLM
from microformers_gemma.modeling_gemma3 import Gemma3ForCausalLM
from microformers_sdk.testing import assert_similar_generation, build_model

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 64,
    "sliding_window": 3,
}


def test_defaults_follow_the_reference() -> None:
    gemma2 = Gemma2Config()
    assert gemma2.layer_types[:4] == ["sliding_attention", "full_attention"] * 2
    assert (gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping) == (50.0, 30.0)
    assert gemma2.rope_parameters == {"rope_type": "default", "rope_theta": 10000.0}
    assert (gemma2.query_pre_attn_scalar, gemma2.sliding_window, gemma2.tie_word_embeddings) == (256, 4096, True)
    gemma3 = Gemma3TextConfig(num_hidden_layers=12)
    assert gemma3.layer_types == (["sliding_attention"] * 5 + ["full_attention"]) * 2
    assert (gemma3.attn_logit_softcapping, gemma3.final_logit_softcapping) == (None, None)
    assert (gemma3.rope_theta, gemma3.rope_local_base_freq) == (1_000_000.0, 10_000.0)


def test_older_gemma3_spelling_is_converted(tmp_path: Path) -> None:
    legacy = {
        **TINY,
        "model_type": "gemma3_text",
        "num_hidden_layers": 4,
        "rope_theta": 5e5,
        "rope_local_base_freq": 100.0,
        "rope_scaling": {"type": "linear", "factor": 8.0},
        "sliding_window_pattern": 2,
    }
    (tmp_path / "config.json").write_text(json.dumps(legacy))
    config = AutoConfig.from_pretrained(tmp_path)
    assert type(config).__name__ == "Gemma3TextConfig"
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2
    assert config.rope_parameters == {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 5e5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    }
    config.save_pretrained(tmp_path / "again")
    saved = json.loads((tmp_path / "again" / "config.json").read_text())
    assert "rope_theta" not in saved and saved["rope_parameters"] == config.rope_parameters
    assert AutoConfig.from_pretrained(tmp_path / "again").layer_types == config.layer_types


@pytest.mark.parametrize(
    ("model_type", "change", "field"),
    [
        ("gemma2", {"num_key_value_heads": 3}, "num_key_value_heads"),
        ("gemma2", {"num_attention_heads": 5}, "num_attention_heads"),
        ("gemma2", {"head_dim": 0}, "head_dim"),
        ("gemma2", {"layer_types": ["full_attention"]}, "layer_types"),
        ("gemma2", {"layer_types": ["sliding_attention", "local"]}, "layer_types"),
        ("gemma2", {"sliding_window": None}, "sliding_window"),
        ("gemma2", {"attn_logit_softcapping": -1.0}, "attn_logit_softcapping"),
        ("gemma2", {"final_logit_softcapping": "30"}, "final_logit_softcapping"),
        ("gemma2", {"query_pre_attn_scalar": 0}, "query_pre_attn_scalar"),
        ("gemma2", {"rope_parameters": {"rope_type": "bogus"}}, "rope_type"),
        ("gemma2", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ("gemma3_text", {"sliding_window_pattern": 0}, "sliding_window_pattern"),
        ("gemma3_text", {"rope_parameters": {"rope_theta": 1.0}}, "rope_parameters"),
        ("gemma3_text", {"num_key_value_heads": 3}, "num_key_value_heads"),
    ],
)
def test_bad_config_is_refused_naming_field_and_file(tmp_path: Path, model_type: str, change: dict, field: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": model_type, **change}))
    with pytest.raises(ConfigError) as info:
        AutoModelForCausalLM.from_pretrained(tmp_path)
    message = str(info.value)
    assert field in message
    assert "config.json" in message


def test_unknown_activation_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="hidden_activation='nope'"):
        Gemma2ForCausalLM(Gemma2Config(**TINY, hidden_activation="nope"))


def test_kernel_names_this_distribution() -> None:
    from microformers import registry

    assert registry.provider_of("configs", "gemma2") == "microformers-gemma"
    assert registry.provider_of("configs", "gemma3_text") == "microformers-gemma"


def test_logits_and_attention_scores_stay_inside_their_caps() -> None:
    model = build_model(
        Gemma2ForCausalLM, Gemma2Config(**TINY, attn_logit_softcapping=0.5, final_logit_softcapping=0.75)
    )
    ids = torch.randint(1, 64, (1, 6))
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    assert float(out.logits.abs().max()) < 0.75
    # with every score within (-0.5, 0.5) no visible key's weight can exceed e^1 times another's
    weights = out.attentions[1][0, :, -1]  # the global layer's last query row: all six keys visible
    assert float(weights.max() / weights.min()) < 2.72
    assert torch.allclose(weights.sum(-1), torch.ones(4))


def test_decoding_past_the_window_matches_full_forwards() -> None:
    """Greedy decoding through the cache gives the tokens that full forwards over the growing sequence pick."""
    model = build_model(Gemma3ForCausalLM, Gemma3TextConfig(**TINY, sliding_window_pattern=2))
    prompt = torch.randint(1, 64, (1, 5))
    with torch.no_grad():
        generated = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
        sequence, scores = prompt, []
        for _ in range(6):
            scores.append(model(sequence, use_cache=False).logits[:, -1])
            sequence = torch.cat((sequence, scores[-1].argmax(-1, keepdim=True)), dim=1)
    # one token at a time through the cache vs full forwards: other shapes, so the same tokens up to a near tie
    assert_similar_generation(generated, sequence, scores, prompt_length=prompt.shape[1])


def test_window_changes_the_result_once_the_sequence_is_longer() -> None:
    ids = torch.randint(1, 64, (1, 8))
    narrow = build_model(Gemma2ForCausalLM, Gemma2Config(**TINY))
    wide = build_model(Gemma2ForCausalLM, Gemma2Config(**{**TINY, "sliding_window": 8}))
    with torch.no_grad():
        a, b = narrow(ids).logits, wide(ids).logits
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)  # within the window: the same
    assert not torch.allclose(a[:, 3:], b[:, 3:], atol=1e-3)  # past it: the local layer sees less


def test_compiled_decode_step_is_refused_and_static_cache_offered() -> None:
    model = build_model(Gemma2ForCausalLM, Gemma2Config(**TINY))
    with pytest.raises(GenerationError, match="compile_config"):
        model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, compile_config={"fullgraph": True}, pad_token_id=0)
    assert model.make_static_cache(16).get_max_cache_shape() == 16


def test_other_attention_implementation_is_refused_while_soft_capping(monkeypatch: pytest.MonkeyPatch) -> None:
    import microformers_gemma.modeling_gemma2 as modeling

    def flashy(*args: object, **kwargs: object) -> torch.Tensor:  # an implementation without soft-capping
        raise AssertionError("must not be called")

    model = build_model(Gemma2ForCausalLM, Gemma2Config(**TINY))
    monkeypatch.setattr(modeling, "get_attention_function", lambda config: flashy)
    with pytest.raises(ConfigError, match="attn_logit_softcapping"):
        model(torch.tensor([[1, 2, 3]]))
    model = build_model(Gemma2ForCausalLM, Gemma2Config(**TINY, attn_logit_softcapping=None))
    with pytest.raises(AssertionError, match="must not be called"):  # without a cap it is used
        model(torch.tensor([[1, 2, 3]]))


def test_resized_embeddings_keep_the_scale() -> None:
    model = build_model(Gemma2ForCausalLM, Gemma2Config(**TINY))
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        before = model(ids).logits
        model.resize_token_embeddings(70)
        after = model(ids).logits
    assert model.get_input_embeddings().embed_scale == pytest.approx(32**0.5)
    assert model.lm_head.weight is model.get_input_embeddings().weight
    assert torch.allclose(before, after[..., :64], atol=1e-6)


def test_hub_files_hybrid_cache_setting_decodes_with_the_default_cache(tmp_path: Path) -> None:
    """Gemma 2 files carry ``cache_implementation: "hybrid"``; the reference decodes them with its dynamic cache."""
    model = build_model(Gemma2ForCausalLM, Gemma2Config(**TINY))
    model.save_pretrained(tmp_path)
    settings = json.loads((tmp_path / "generation_config.json").read_text())
    (tmp_path / "generation_config.json").write_text(json.dumps({**settings, "cache_implementation": "hybrid"}))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.generation_config.cache_implementation is None
    prompt = torch.tensor([[5, 6, 7]])
    options = {"max_new_tokens": 4, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    # exact: both decode with the same (default) cache and code, the weights save/load copied byte for byte
    assert torch.equal(loaded.generate(prompt, **options), model.generate(prompt, **options))

"""microformers-phi3 on its own: config checks, checkpoint names, LongRoPE switching, static-cache decode steps."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoConfig, AutoModelForCausalLM, ConfigError
from microformers_phi3.configuration_phi3 import Phi3Config
from microformers_phi3.modeling_phi3 import Phi3ForCausalLM
from microformers_sdk.cache import DynamicCache, StaticCache
from microformers_sdk.testing import (
    assert_similar_generation,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)

TINY: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "original_max_position_embeddings": 8,
    "pad_token_id": 0,
    "eos_token_id": 1,
}
SCORES = {"output_scores": True, "return_dict_in_generate": True}
FACTORS = {"short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [2.0, 3.0, 4.0, 8.0]}


def tiny_model(**overrides: Any) -> Phi3ForCausalLM:
    torch.manual_seed(0)
    model = Phi3ForCausalLM(Phi3Config(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0, 0.3)
    return model


def write_config(folder: Path, **fields: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "phi3", **TINY, **fields}))
    return folder


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"hidden_size": 30}, "hidden_size=30"),
        ({"num_key_value_heads": 3}, "num_key_value_heads=3"),
        ({"rope_scaling": {"type": "longrope", **FACTORS, "short_factor": [1.0, 2.0]}}, "short_factor"),
        ({"rope_scaling": {"type": "su", **FACTORS, "long_factor": [1.0] * 5}}, "long_factor"),
        ({"partial_rotary_factor": 0.5, "rope_scaling": {"type": "longrope", **FACTORS}}, "short_factor"),
        ({"rope_scaling": {"type": "longrope", "long_factor": FACTORS["long_factor"]}}, "short_factor"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"sliding_window": 0}, "sliding_window"),
    ],
)
def test_bad_config_is_refused_naming_the_field_and_file(tmp_path: Path, fields: dict[str, Any], named: str) -> None:
    folder = write_config(tmp_path / "bad", **fields)
    with pytest.raises(ConfigError, match=named) as caught:
        AutoConfig.from_pretrained(folder)
    assert "config.json" in str(caught.value)


def test_legacy_rope_names_become_longrope_and_round_trip(tmp_path: Path) -> None:
    for legacy in ("su", "yarn"):
        config = Phi3Config(**TINY, rope_scaling={"type": legacy, **FACTORS})
        assert config.rope_scaling["rope_type"] == "longrope"
        assert config.rope_parameters["rope_type"] == "longrope"
    config.save_pretrained(tmp_path)
    again = AutoConfig.from_pretrained(tmp_path)
    assert again.rope_parameters == config.rope_parameters
    newer = Phi3Config(**TINY, rope_parameters={"rope_type": "longrope", "rope_theta": 500.0, **FACTORS})
    assert newer.rope_theta == 500.0 and newer.rope_scaling["short_factor"] == FACTORS["short_factor"]


def test_checkpoint_tensor_names_are_the_fused_ones() -> None:
    names = set(tiny_model().state_dict())
    layer = {name.split("layers.0.", 1)[1] for name in names if "layers.0." in name}
    assert layer == {
        "input_layernorm.weight",
        "self_attn.qkv_proj.weight",
        "self_attn.o_proj.weight",
        "post_attention_layernorm.weight",
        "mlp.gate_up_proj.weight",
        "mlp.down_proj.weight",
    }
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= names
    model = tiny_model()
    assert model.model.layers[0].self_attn.qkv_proj.weight.shape == (32 + 2 * 16, 32)
    assert model.model.layers[0].mlp.gate_up_proj.weight.shape == (2 * 48, 32)


def test_long_factors_apply_past_the_original_length_and_generate_recomputes_there() -> None:
    model = tiny_model(rope_scaling={"type": "longrope", **FACTORS})
    rotary = model.model.rotary_emb
    short_cos, _ = rotary(torch.arange(8)[None])
    long_cos, _ = rotary(torch.arange(9)[None])
    assert not torch.allclose(short_cos[:, 1], long_cos[:, 1])  # position 1 rotates differently once the call is long
    assert model.cache_needs_recompute(past_length=8, total_length=9)
    assert not model.cache_needs_recompute(past_length=7, total_length=8)
    assert not model.cache_needs_recompute(past_length=9, total_length=10)
    assert not tiny_model().cache_needs_recompute(past_length=8, total_length=9)  # plain rotary: cache stays valid

    ids = torch.randint(2, 64, (1, 5), generator=torch.Generator().manual_seed(1))
    settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, **SCORES}
    generated = model.generate(ids, **settings)
    uncached = model.generate(ids, use_cache=False, **settings)
    # the cache was rebuilt with the long factors at 9 tokens: the same tokens as full forwards (other shapes,
    # so up to a near tie)
    assert_similar_generation(generated.sequences, uncached.sequences, uncached.scores, prompt_length=ids.shape[1])


def stepwise_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor, cache: Any, prefill: int) -> torch.Tensor:
    out = model(ids[:, :prefill], attention_mask=mask[:, :prefill], past_key_values=cache)
    logits = [out.logits]
    for t in range(prefill, ids.shape[1]):
        out = model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=out.past_key_values)
        logits.append(out.logits)
    return torch.cat(logits, dim=1)


class CountingStep:
    """Stands in for the compiled step: runs the function that gets compiled (``model.logits``) and counts calls."""

    def __init__(self, model: Any) -> None:
        self.function = model.logits
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.function(*args)


def test_static_decode_steps_match_the_dynamic_cache() -> None:
    model = tiny_model(partial_rotary_factor=0.5)
    ids = torch.randint(2, 64, (2, 10), generator=torch.Generator().manual_seed(6))
    mask = torch.ones_like(ids)
    mask[1, :6] = 0  # row 1 is padding for the prompt and the first steps
    step = CountingStep(model)
    object.__setattr__(model, "_compiled_decode_step", step)
    with torch.no_grad():
        eager = stepwise_logits(model, ids, mask, DynamicCache(), prefill=2)
        cache = StaticCache(max_cache_len=12)
        fast = stepwise_logits(model, ids, mask, cache, prefill=2)
    assert step.calls == 8  # every one-token step went through the (stand-in) compiled function
    for keys, values in cache:
        assert torch.isfinite(keys).all() and torch.isfinite(values).all()
    valid = mask.bool()
    torch.testing.assert_close(fast[valid], eager[valid], rtol=1e-5, atol=1e-5)
    settings = {"attention_mask": mask, "max_new_tokens": 4, "do_sample": False, **SCORES}
    static, dynamic = model.generate(ids, cache_implementation="static", **settings), model.generate(ids, **settings)
    # a static cache attends over a differently shaped (padded) cache: the same tokens up to a near tie
    assert_similar_generation(
        static.sequences, dynamic.sequences, dynamic.scores, prompt_length=ids.shape[1], pad_token_id=0
    )
    model.uncompile_decode_step()
    assert "_compiled_decode_step" not in model.__dict__


def test_saved_model_loads_back_identically(tmp_path: Path) -> None:
    model = tiny_model(tie_word_embeddings=True, rope_scaling={"type": "longrope", **FACTORS}, sliding_window=4)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded).__name__ == "Phi3ForCausalLM"
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    ids = torch.randint(2, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)  # exact: save/load copies the bytes; same code


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "c++")) is None, reason="torch.compile on CPU needs a C++ compiler (CXX)"
)
def test_compiled_decode_step_generates_the_eager_tokens() -> None:
    model = tiny_model()
    ids = torch.randint(2, 64, (2, 5), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    settings = {"attention_mask": mask, "max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, **SCORES}
    eager = model.generate(ids, **settings)
    model.compile_decode_step()
    compiled = model.generate(ids, past_key_values=StaticCache(max_cache_len=13), **settings)
    # compiled kernels over a static cache vs eager over a dynamic one: the same tokens up to a near tie
    assert_similar_generation(compiled.sequences, eager.sequences, eager.scores, prompt_length=ids.shape[1])

"""The fast decoding paths (one-row products, the static-cache decode step, its compiled form) match eager."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoModelForCausalLM, GenerationError
from microformers_llama.configuration_llama import LlamaConfig
from microformers_llama.configuration_mistral import MistralConfig
from microformers_llama.configuration_qwen2 import Qwen2Config
from microformers_llama.modeling_llama import LlamaForCausalLM
from microformers_llama.modeling_mistral import MistralForCausalLM
from microformers_llama.modeling_qwen2 import Qwen2ForCausalLM
from microformers_sdk.attention import sdpa_attention
from microformers_sdk.cache import DynamicCache, StaticCache
from microformers_sdk.decode_steps import RegionalDecodeStep, static_layer_step
from microformers_sdk.static_steps import visible_storage
from microformers_sdk.testing import assert_close, assert_similar_generation

SCORED = {"return_dict_in_generate": True, "output_scores": True}

# torch.compile on the CPU generates and compiles C++
needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "c++")) is None,
    reason=f"torch.compile on the CPU needs a C++ compiler ({os.environ.get('CXX', 'c++')!r} is not on PATH)",
)
# torch's inductor (2.13) emits at::vec reductions for these graphs even where ATEN_CPU_CAPABILITY=default leaves it
# no vector ISA, and its C++ then fails to compile ("'at::vec' has not been declared"): a torch limitation
needs_inductor_vectors = pytest.mark.skipif(
    os.environ.get("ATEN_CPU_CAPABILITY") == "default",
    reason="torch.compile's C++ code for these graphs does not build under ATEN_CPU_CAPABILITY=default",
)
# Weights drawn with a 0.3 spread (tiny_model) amplify rounding through three layers: the step-by-step and full
# forwards (other matrix shapes) differ by up to 1.2e-5 in logits around 0.1-1 under ATen's default kernels.
DECODE_ATOL = 5e-5

TINY: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "tie_word_embeddings": True,
    "pad_token_id": 0,
    "eos_token_id": 1,
}


def tiny_model(cls: type = LlamaForCausalLM, config_cls: type = LlamaConfig, **overrides: Any) -> Any:
    torch.manual_seed(0)
    model = cls(config_cls(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0, 0.3)  # larger than the initialiser's spread, so differences show
    return model


class CountingStep:
    """Stands in for the compiled step: runs the function that gets compiled (``model.logits``) and counts calls."""

    def __init__(self, model: Any) -> None:
        self.function = model.logits
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.function(*args)


def install_uncompiled_step(model: Any) -> CountingStep:
    step = CountingStep(model)
    object.__setattr__(model, "_compiled_decode_step", step)
    return step


def stepwise_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor | None, cache: Any, prefill: int) -> torch.Tensor:
    out = model(ids[:, :prefill], attention_mask=None if mask is None else mask[:, :prefill], past_key_values=cache)
    logits = [out.logits]
    for t in range(prefill, ids.shape[1]):
        step_mask = None if mask is None else mask[:, : t + 1]
        out = model(ids[:, t : t + 1], attention_mask=step_mask, past_key_values=out.past_key_values)
        logits.append(out.logits)
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize("family", ["llama", "qwen2-bias"])
def test_batch_one_steps_match_the_full_forward(family: str) -> None:
    model = tiny_model() if family == "llama" else tiny_model(Qwen2ForCausalLM, Qwen2Config)
    ids = torch.randint(2, 64, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids).logits
        stepped = stepwise_logits(model, ids, None, DynamicCache(), prefill=3)
    torch.testing.assert_close(stepped, full, rtol=1e-5, atol=DECODE_ATOL)


@pytest.mark.parametrize("family", ["llama", "qwen2-bias"])
@pytest.mark.parametrize("padded", [False, True])
def test_static_decode_step_matches_eager_steps(family: str, padded: bool) -> None:
    model = tiny_model() if family == "llama" else tiny_model(Qwen2ForCausalLM, Qwen2Config)
    ids = torch.randint(2, 64, (2, 10), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    if padded:
        mask[1, :3] = 0
    with torch.no_grad():
        eager = stepwise_logits(model, ids, mask, DynamicCache(), prefill=4)  # cache.update, ordinary masks
        step = install_uncompiled_step(model)
        fast = stepwise_logits(model, ids, mask, StaticCache(max_cache_len=16), prefill=4)
    assert step.calls == 6
    valid = mask.bool()
    torch.testing.assert_close(fast[valid], eager[valid], rtol=1e-5, atol=DECODE_ATOL)


def test_decode_step_is_only_used_where_it_applies() -> None:
    model = tiny_model()
    step = install_uncompiled_step(model)
    ids = torch.randint(2, 64, (1, 6))
    with torch.no_grad():
        stepwise_logits(model, ids, None, DynamicCache(), prefill=3)  # not a static cache
        stepwise_logits(model, ids, None, StaticCache(max_cache_len=8), prefill=6)  # prompt only
        cache = StaticCache(max_cache_len=8)
        model(ids[:, :3], past_key_values=cache)
        model(ids[:, 3:5], past_key_values=cache)  # two tokens at once
        model(ids[:, 5:6], past_key_values=cache, output_hidden_states=True)
    assert step.calls == 0
    windowed = tiny_model(MistralForCausalLM, MistralConfig, sliding_window=4)
    step = install_uncompiled_step(windowed)
    with torch.no_grad():
        stepwise_logits(windowed, ids, None, StaticCache(max_cache_len=8), prefill=3)
    assert step.calls == 0  # a window shorter than the cache needs the eager mask
    model.uncompile_decode_step()
    assert "_compiled_decode_step" not in model.__dict__


def test_greedy_tokens_match_the_reference(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    ours = tiny_model()
    ours.save_pretrained(tmp_path)
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.randint(2, 64, (1, 5), generator=torch.Generator().manual_seed(3))
    settings = {"max_new_tokens": 20, "min_new_tokens": 20, "do_sample": False, "pad_token_id": 0}
    expected = reference.generate(ids, **settings, **SCORED)
    # two libraries' kernels (and then the static decode step): the same tokens up to a near tie
    similar = {"prompt_length": ids.shape[1], "pad_token_id": 0}
    assert_similar_generation(loaded.generate(ids, **settings), expected.sequences, expected.scores, **similar)
    install_uncompiled_step(loaded)
    static = loaded.generate(ids, past_key_values=loaded.make_static_cache(25), **settings)
    assert_similar_generation(static, expected.sequences, expected.scores, **similar)


@pytest.mark.slow
@needs_compiler
@needs_inductor_vectors
def test_compiled_decode_step_generates_the_eager_tokens() -> None:
    model = tiny_model()
    ids = torch.randint(2, 64, (2, 5), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    settings = {"attention_mask": mask, "max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}
    eager = model.generate(ids, **settings, **SCORED)
    model.compile_decode_step()
    compiled = model.generate(ids, past_key_values=StaticCache(max_cache_len=13), **settings)
    # compiled static steps against eager dynamic ones: other kernels and shapes, the same tokens up to a near tie
    assert_similar_generation(compiled, eager.sequences, eager.scores, prompt_length=ids.shape[1])


def test_generate_settings_select_the_static_cache_and_compiled_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cache_implementation="static"`` and ``compile_config`` (the reference's names) switch the fast paths on."""
    model = tiny_model()
    ids = torch.randint(2, 64, (1, 5), generator=torch.Generator().manual_seed(5))
    settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False}
    eager = model.generate(ids, **settings, **SCORED)
    counting = install_uncompiled_step(model)
    static = model.generate(ids, cache_implementation="static", **settings)
    # the static decode step against the dynamic cache: other shapes, the same tokens up to a near tie
    assert_similar_generation(static, eager.sequences, eager.scores, prompt_length=ids.shape[1])
    assert counting.calls == 5  # every step after the prompt went through the static decode step

    compiled_with = []
    monkeypatch.setattr(model, "compile_decode_step", lambda **options: compiled_with.append(options))
    model.generate(ids, cache_implementation="static", compile_config={"mode": "default"}, **settings)
    assert compiled_with == [{"mode": "default"}]
    with pytest.raises(GenerationError, match="cache_implementation"):
        model.generate(ids, cache_implementation="paged", **settings)


@pytest.mark.parametrize("compiled_function", [False, True])
def test_static_steps_of_a_row_still_all_padding_stay_finite(compiled_function: bool) -> None:
    """A padding step in a row with no real token yet must not store non-finite keys/values.

    Row 1 is padding for the prompt and the first static steps; its later real tokens must match the
    dynamic cache's logits (the masked-out positions once poisoned them with NaN: 0 * NaN = NaN).
    """
    model = tiny_model()
    ids = torch.randint(2, 64, (2, 10), generator=torch.Generator().manual_seed(6))
    mask = torch.ones_like(ids)
    mask[1, :6] = 0
    with torch.no_grad():
        eager = stepwise_logits(model, ids, mask, DynamicCache(), prefill=2)
        if compiled_function:
            step = install_uncompiled_step(model)
        cache = StaticCache(max_cache_len=12)
        fast = stepwise_logits(model, ids, mask, cache, prefill=2)
    if compiled_function:
        assert step.calls == 8
    for keys, values in cache:
        assert torch.isfinite(keys).all() and torch.isfinite(values).all()
    valid = mask.bool()
    assert torch.isfinite(fast[valid]).all()
    torch.testing.assert_close(fast[valid], eager[valid], rtol=1e-5, atol=DECODE_ATOL)


def uncompiled_regional_step(model: Any) -> RegionalDecodeStep:
    """What ``compile_decode_step(regional=True)`` installs, with the layer step left uncompiled."""
    step = RegionalDecodeStep(model, model.decode_step_layout(), static_layer_step)
    object.__setattr__(model, "_compiled_decode_step", step)
    return step


def test_regional_step_function_matches_eager_steps() -> None:
    """The layer function regional compilation compiles, run uncompiled: the eager steps' logits."""
    model = tiny_model(Qwen2ForCausalLM, Qwen2Config)  # biases on q/k/v
    ids = torch.randint(2, 64, (2, 10), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        eager = stepwise_logits(model, ids, mask, DynamicCache(), prefill=4)
        uncompiled_regional_step(model)
        regional = stepwise_logits(model, ids, mask, StaticCache(max_cache_len=12), prefill=4)
    valid = mask.bool()
    torch.testing.assert_close(regional[valid], eager[valid], rtol=1e-5, atol=DECODE_ATOL)


@pytest.mark.parametrize("family", ["llama", "qwen2-bias"])
def test_the_static_layer_step_is_the_eager_layer(family: str) -> None:
    """One Llama layer definition: the static step of a layer (storage passed in, the whole capacity attended
    with a mask) gives what the layer's ordinary forward gives over a dynamic cache, on random inputs."""
    model = tiny_model() if family == "llama" else tiny_model(Qwen2ForCausalLM, Qwen2Config)
    layer, config = model.model.layers[1], model.config
    generator = torch.Generator().manual_seed(11)
    batch, past, capacity, heads, head_dim = 2, 5, 9, config.num_key_value_heads, config.head_dim
    keys, values = (torch.randn(batch, heads, past, head_dim, generator=generator) for _ in range(2))
    hidden = torch.randn(batch, 1, config.hidden_size, generator=generator)
    rotary = model.model.rotary_emb(torch.full((batch, 1), past), dtype=hidden.dtype)
    with torch.no_grad():
        dynamic = DynamicCache()
        dynamic.update(keys, values, 1)
        expected, _ = layer(hidden, rotary, None, False, dynamic, sdpa_attention)
        key_storage, value_storage = (torch.zeros(batch, heads, capacity, head_dim) for _ in range(2))
        key_storage[:, :, :past], value_storage[:, :, :past] = keys, values
        visible = visible_storage(capacity, past, None, hidden)
        position = torch.tensor([past])
        got = static_layer_step(layer, hidden, rotary, visible, key_storage, value_storage, position, sdpa_attention)
    assert_close(got, expected)
    assert_close(key_storage[:, :, : past + 1], dynamic[1][0])  # the new key written where the cache appends it
    assert_close(value_storage[:, :, : past + 1], dynamic[1][1])


def test_regional_steps_run_an_overriding_layer_forward() -> None:
    """The regional step is each layer's own forward: a subclass overriding it is what runs (nothing refused)."""
    model = tiny_model()
    model.compile_decode_step(regional=True)  # compiles on the first step
    assert model.__dict__["_compiled_decode_options"]["regional"] is True
    calls = []

    class OtherLayer(type(model.model.layers[0])):
        def forward(self, *args: Any) -> Any:
            calls.append(1)
            return super().forward(*args)

    model.model.layers[0].__class__ = OtherLayer
    uncompiled_regional_step(model)
    with torch.no_grad():
        stepwise_logits(model, torch.randint(2, 64, (1, 6)), None, StaticCache(max_cache_len=8), prefill=3)
    assert len(calls) == 1 + 3  # the prompt (eager), then each static step through the regional runner
    model.uncompile_decode_step()
    assert "_compiled_decode_step" not in model.__dict__


@pytest.mark.slow
@needs_compiler
@needs_inductor_vectors
def test_regional_compiled_decode_step_generates_the_eager_tokens() -> None:
    model = tiny_model()
    ids = torch.randint(2, 64, (2, 5), generator=torch.Generator().manual_seed(8))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    settings = {"attention_mask": mask, "max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}
    eager = model.generate(ids, **settings, **SCORED)
    model.compile_decode_step(regional=True)
    compiled = model.generate(ids, past_key_values=StaticCache(max_cache_len=13), **settings)
    # compiled layers against eager ones: other kernels and shapes, the same tokens up to a near tie
    assert_similar_generation(compiled, eager.sequences, eager.scores, prompt_length=ids.shape[1])


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
def test_packed_weights_decode_a_padded_batch_like_the_float_model() -> None:
    """pack_linear_weights (opt-in, batched decoding): same greedy tokens, logits up to summation order."""
    from microformers_sdk import PackedLinear, pack_linear_weights

    plain, packed = tiny_model(), tiny_model()
    assert pack_linear_weights(packed) == 3 * 7  # every projection; the tied head stays
    assert isinstance(packed.model.layers[0].self_attn.q_proj, PackedLinear)
    ids = torch.randint(2, 64, (4, 9))
    mask = torch.ones_like(ids)
    for row, pad in enumerate((0, 2, 5, 8)):
        ids[row, :pad], mask[row, :pad] = 0, 0
    with torch.no_grad():
        expected, got = plain(ids, attention_mask=mask).logits, packed(ids, attention_mask=mask).logits
    assert torch.allclose(got[mask.bool()], expected[mask.bool()], atol=1e-4, rtol=1e-5)
    settings = {"max_new_tokens": 12, "min_new_tokens": 12, "do_sample": False, "pad_token_id": 0}
    expected_out = plain.generate(ids, attention_mask=mask, **settings, **SCORED)
    # oneDNN's packed products against plain ones: the same tokens up to a near tie
    assert_similar_generation(
        packed.generate(ids, attention_mask=mask, **settings),
        expected_out.sequences,
        expected_out.scores,
        prompt_length=ids.shape[1],
        pad_token_id=0,
    )


@pytest.mark.parametrize("family", ["llama", "qwen2-bias", "mistral-window"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("keep", [1, 3])
def test_logits_to_keep_computes_the_last_positions_of_the_full_forward(family: str, padded: bool, keep: int) -> None:
    # logits_to_keep=n runs the last layer's attention output and MLP for the last n positions only
    if family == "llama":
        model = tiny_model()
    elif family == "qwen2-bias":
        model = tiny_model(Qwen2ForCausalLM, Qwen2Config)
    else:
        model = tiny_model(MistralForCausalLM, MistralConfig, sliding_window=4)
    ids = torch.randint(2, 64, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :3] = 0
    with torch.inference_mode():
        full = model(ids, attention_mask=mask, past_key_values=DynamicCache())
        kept = model(ids, attention_mask=mask, past_key_values=DynamicCache(), logits_to_keep=keep)
        assert kept.logits.shape == (2, keep, 64)
        assert_close(kept.logits, full.logits[:, -keep:])
        for layer in range(len(model.model.layers)):  # the cache holds every position's keys and values
            for got, expected in zip(kept.past_key_values[layer], full.past_key_values[layer], strict=True):
                assert_close(got, expected)
        step = torch.tensor([[5], [7]])
        step_mask = torch.cat((mask, torch.ones(2, 1, dtype=mask.dtype)), dim=1)
        after_full = model(step, attention_mask=step_mask, past_key_values=full.past_key_values).logits
        after_kept = model(step, attention_mask=step_mask, past_key_values=kept.past_key_values).logits
    assert_close(after_kept, after_full)


def test_logits_to_keep_still_runs_the_last_layer_whole_where_asked_to() -> None:
    model = tiny_model()
    ids = torch.randint(2, 64, (1, 8), generator=torch.Generator().manual_seed(4))
    last = model.model.layers[-1]
    seen: list[int] = []
    handle = last.register_forward_hook(lambda _module, _args, output: seen.append(output[0].shape[1]))
    with torch.inference_mode():
        hooked = model(ids, logits_to_keep=1).logits
        handle.remove()
        hidden = model(ids, logits_to_keep=1, output_hidden_states=True)
        plain = model(ids, logits_to_keep=1).logits
    assert seen == [8]  # a hooked layer is called as a module, over every position
    assert hidden.hidden_states[-1].shape[1] == 8  # per-layer outputs asked for: every position computed
    assert_close(plain, hooked)
    assert_close(hidden.logits, hooked)

"""The native decoding step (``mfquant::decoder_step``): every layer of a quantized Llama-style decoder in one call."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoModelForCausalLM, Int4Config, Int8Config
from microformers.errors import InputError
from microformers_quant import decoder_step
from microformers_sdk.testing import assert_close, assert_similar_generation

from .conftest import make_checkpoint
from .markers import needs_quant_kernels

IDS = torch.tensor([[1, 5, 9, 33, 40, 7, 60, 11]])
SETTINGS = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "cache_implementation": "static"}
# the eager static step to compare with: generate() would otherwise take the native step by default
EAGER = {"compile_config": False}


@pytest.fixture(scope="module")
def tiny_qwen2_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Biases on the attention projections (Qwen2's q/k/v, here on o as well) and an odd head layout."""
    folder = tmp_path_factory.mktemp("tiny-biased")
    return make_checkpoint(folder, attention_bias=True, num_attention_heads=8, num_key_value_heads=2)


def count_native_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = decoder_step.QuantDecoderStep.__call__

    def counted(self: Any, *args: Any) -> torch.Tensor:
        calls.append(args[-1])  # the position written
        return original(self, *args)

    monkeypatch.setattr(decoder_step.QuantDecoderStep, "__call__", counted)
    return calls


def generate(model: Any, ids: torch.Tensor, **extra: Any) -> Any:
    with torch.no_grad():
        return model.generate(ids, output_logits=True, return_dict_in_generate=True, **SETTINGS, **extra)


def assert_same_decoding(native: Any, eager: Any, prompt_length: int, tolerance: float = 1e-4) -> None:
    """The native step against the eager one: other kernels, so the same tokens up to a near tie of the logits
    (within ``tolerance``, what the two may drift apart), and logits within ``tolerance`` for every step before
    the first difference (every step where the tokens are the same)."""
    assert_similar_generation(
        native.sequences, eager.sequences, eager.logits, prompt_length=prompt_length, tie_tolerance=tolerance
    )
    if torch.equal(native.sequences, eager.sequences):
        assert len(native.logits) == len(eager.logits)
    drift = 0.0
    for step, (a, b) in enumerate(zip(native.logits, eager.logits)):
        if not torch.equal(native.sequences[:, : prompt_length + step], eager.sequences[:, : prompt_length + step]):
            break
        drift = max(drift, float((a - b).abs().max()))
    assert drift < tolerance


@needs_quant_kernels
@pytest.mark.parametrize(
    "fixture,config,tolerance",
    [
        ("tiny_llama", Int4Config(group_size=32), 1e-4),
        ("tiny_llama", Int8Config(), 1e-4),
        ("tiny_qwen2_like", Int4Config(group_size=64), 1e-4),
        ("tiny_llama", Int4Config(group_size=32, activations="int16"), 2e-3),
        # interleaved layers, int8 activations both ways: a float difference before a rounding may flip it
        ("tiny_llama", Int8Config(activations="int8"), 1e-2),
    ],
)
def test_native_step_gives_the_eager_steps_logits(
    fixture: str, config: Any, tolerance: float, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = AutoModelForCausalLM.from_pretrained(request.getfixturevalue(fixture), quantization_config=config)
    eager = generate(model, IDS, **EAGER)
    model.compile_decode_step()
    calls = count_native_calls(monkeypatch)
    native = generate(model, IDS)
    # the prompt (its last logits only: generate's) at position 0, then every step after it at its position
    assert calls == [0, *range(IDS.shape[1], IDS.shape[1] + 7)]
    assert_same_decoding(native, eager, IDS.shape[1], tolerance)


@needs_quant_kernels
def test_left_padded_batch_matches_eager(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of different lengths: per-row rotary positions and the padding hidden from each row's attention."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    ids = torch.tensor([[0, 0, 0, 5, 9, 33, 40, 7], [1, 5, 9, 33, 40, 7, 60, 11]])
    mask = (ids != 0).long()
    eager = generate(model, ids, attention_mask=mask, **EAGER)
    model.compile_decode_step()
    calls = count_native_calls(monkeypatch)
    native = generate(model, ids, attention_mask=mask)
    assert len(calls) == 7
    assert_same_decoding(native, eager, ids.shape[1])


@needs_quant_kernels
def test_uncompile_returns_to_the_eager_step(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After uncompile_decode_step() nothing is installed: generate() decides by call (native by default,
    eager with compile_config=False)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config())
    model.compile_decode_step()
    model.uncompile_decode_step()
    assert "_compiled_decode_step" not in model.__dict__
    calls = count_native_calls(monkeypatch)
    generate(model, IDS, **EAGER)
    assert calls == []


@needs_quant_kernels
def test_a_deep_copy_of_a_model_decodes_through_its_own_tensors(tiny_llama: Path) -> None:
    """The installed step goes with a deep copy, holding (and handing its op) the copy's buffers: changing the
    original afterwards changes the original's logits only."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config(activations="int8"))
    model.compile_decode_step()
    before = generate(model, IDS).logits
    copied = copy.deepcopy(model)
    step = copied.__dict__["_compiled_decode_step"].layers_step
    assert step.params[1] is copied.model.layers[0].self_attn.q_proj.qweight
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.scales.mul_(-3.0)
    # the same tensors, kernels and inputs: the copy's logits are exactly the original's before the change
    assert all(torch.equal(a, b) for a, b in zip(generate(copied, IDS).logits, before, strict=True))
    assert not torch.equal(generate(model, IDS).logits[-1], before[-1])


@needs_quant_kernels
def test_an_installed_step_reads_weights_given_new_data_after_its_first_call(tiny_llama: Path) -> None:
    """The op keeps its checked views of the layers between calls; a weight given new storage (``.data = ...``)
    after that is read from its new storage, as a fresh step would read it."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config(activations="int8"))
    model.compile_decode_step()
    generate(model, IDS)
    scales = model.model.layers[0].self_attn.q_proj.scales
    scales.data = scales.data * -3.0  # new storage, the old one freed
    after_change = generate(model, IDS).logits
    fresh = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config(activations="int8"))
    fresh.model.layers[0].self_attn.q_proj.scales.data = fresh.model.layers[0].self_attn.q_proj.scales.data * -3.0
    fresh.compile_decode_step()
    # the same tensors' values, kernels and inputs: the same logits exactly
    assert all(torch.equal(a, b) for a, b in zip(after_change, generate(fresh, IDS).logits, strict=True))


def test_layers_without_a_native_step(tiny_llama: Path) -> None:
    float_model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    with pytest.raises(InputError, match="no native decode step"):
        float_model.compile_decode_step(native=True)
    quantized = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config())
    quantized.model.layers[1].mlp.down_proj.register_forward_hook(lambda *_: None)  # a hook must still run
    with pytest.raises(InputError, match="no native decode step"):
        quantized.compile_decode_step(native=True)
    with pytest.raises(InputError, match="compiles nothing"):
        quantized.compile_decode_step(native=True, mode="default")


@needs_quant_kernels
def test_a_batch_sharing_positions_without_position_ids(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Direct forward calls into a static cache, no position ids: one rotary row serves every batch row."""
    from microformers_sdk.cache import StaticCache

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    ids, step = torch.tensor([[1, 5, 9, 33], [4, 8, 12, 40]]), torch.tensor([[7], [9]])

    def next_logits() -> torch.Tensor:
        cache = StaticCache(max_cache_len=8)
        with torch.no_grad():
            model(ids, past_key_values=cache, use_cache=True)
            return model(step, past_key_values=cache, use_cache=True).logits

    eager = next_logits()
    model.compile_decode_step(native=True)
    calls = count_native_calls(monkeypatch)
    torch.testing.assert_close(next_logits(), eager, rtol=1e-4, atol=1e-4)
    assert calls == [4]


@needs_quant_kernels
def test_beam_search_reorders_the_cache_the_native_step_reads(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    settings = {**SETTINGS, "num_beams": 3, "return_dict_in_generate": True, "output_scores": True}
    with torch.no_grad():
        eager = model.generate(IDS, **settings, **EAGER)
        model.compile_decode_step()
        calls = count_native_calls(monkeypatch)
        native = model.generate(IDS, **settings)
    assert len(calls) == 7
    # other kernels: the same beam up to a near tie of the scores of the beam it came from
    rows = [scores[eager.beam_indices[:, step].clamp(min=0)] for step, scores in enumerate(eager.scores)]
    assert_similar_generation(native.sequences, eager.sequences, rows, prompt_length=IDS.shape[1])
    if torch.equal(native.sequences, eager.sequences):
        assert_close(native.sequences_scores, eager.sequences_scores, rtol=1e-4, atol=1e-4)


@needs_quant_kernels
def test_a_long_cache_matches_eager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """150 cached positions: the vectorised softmax over many 8-wide chunks, and the cache's capacity unused past it."""
    model = AutoModelForCausalLM.from_pretrained(
        make_checkpoint(tmp_path, max_position_embeddings=512), quantization_config=Int4Config(group_size=32)
    )
    ids = torch.randint(3, 90, (1, 150), generator=torch.Generator().manual_seed(0))
    eager = generate(model, ids, **EAGER)
    model.compile_decode_step()
    calls = count_native_calls(monkeypatch)
    native = generate(model, ids)
    assert calls == [0, *range(150, 157)]
    assert_same_decoding(native, eager, ids.shape[1])


@needs_quant_kernels
@pytest.mark.parametrize(
    "fixture,config,includes_head",
    [
        ("tiny_llama", Int4Config(group_size=32), True),  # the head tied to the quantized embedding
        ("tiny_llama_untied", Int8Config(), True),  # a quantized head of its own
        ("tiny_llama_untied", Int4Config(group_size=32, modules_to_not_convert=["lm_head"]), False),  # a float head
    ],
)
def test_the_final_norm_and_head_run_natively_where_the_head_is_quantized(
    fixture: str, config: Any, includes_head: bool, request: pytest.FixtureRequest
) -> None:
    model = AutoModelForCausalLM.from_pretrained(request.getfixturevalue(fixture), quantization_config=config)
    eager = generate(model, IDS, **EAGER)
    model.compile_decode_step()
    assert model.__dict__["_compiled_decode_step"].includes_head is includes_head
    native = generate(model, IDS)
    assert_same_decoding(native, eager, IDS.shape[1])


@needs_quant_kernels
def test_a_hooked_head_or_final_norm_runs_eagerly_after_the_native_layers(tiny_llama: Path) -> None:
    for hooked in ("lm_head", "model.norm"):
        model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config())
        seen: list[int] = []
        model.get_submodule(hooked).register_forward_hook(lambda *_, seen=seen: seen.append(1))
        model.compile_decode_step()
        step = model.__dict__["_compiled_decode_step"]
        assert isinstance(step.layers_step, decoder_step.QuantDecoderStep) and not step.includes_head
        generate(model, IDS)
        assert len(seen) == SETTINGS["max_new_tokens"]  # the hook ran at the prompt and at every step


@needs_quant_kernels
def test_a_tied_quantized_head_adds_its_bias(tiny_llama: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config())
    head = model.lm_head
    x = torch.randn(2, 3, head.in_features)
    with torch.no_grad():
        plain = head(x)
        head.bias = torch.nn.Parameter(torch.linspace(-3.0, 3.0, head.out_features))
        assert torch.allclose(head(x), plain + head.bias, atol=1e-6)
    eager = generate(model, IDS, **EAGER)
    model.compile_decode_step()
    assert model.__dict__["_compiled_decode_step"].includes_head
    native = generate(model, IDS)
    assert_same_decoding(native, eager, IDS.shape[1])


@needs_quant_kernels
def test_a_batch_past_the_gemm_threshold_matches_eager(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """16+ rows take the de-quantised tiles + GEMM inside the step, copied into the step's buffers."""
    from microformers_quant import kernels

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    torch.manual_seed(3)
    ids = torch.randint(1, 60, (kernels.GEMM_MIN_ROWS + 2, 6))
    eager = generate(model, ids, **EAGER)
    model.compile_decode_step()
    calls = count_native_calls(monkeypatch)
    native = generate(model, ids)
    assert len(calls) == 7
    assert_same_decoding(native, eager, ids.shape[1])


@needs_quant_kernels
@pytest.mark.parametrize(
    "fixture,config",
    [("tiny_llama", Int8Config()), ("tiny_llama", Int4Config(group_size=32)), ("tiny_qwen2_like", Int8Config())],
)
def test_the_native_step_computes_the_eager_llama_layers(
    fixture: str, config: Any, request: pytest.FixtureRequest
) -> None:
    """One Llama layer definition: the C++ step over the layers as ``decode_step_layout`` describes them gives
    what the layers' own forward gives over a dynamic cache (random hidden states, cached keys and values),
    and writes the same new keys and values."""
    from microformers_sdk.attention import sdpa_attention
    from microformers_sdk.cache import DynamicCache
    from microformers_sdk.static_steps import visible_storage

    model = AutoModelForCausalLM.from_pretrained(request.getfixturevalue(fixture), quantization_config=config)
    layout = model.decode_step_layout()
    step = decoder_step.QuantDecoderStep.build(layout.native_parts, layout.shape)
    assert step is not None
    shape, hidden_size = layout.shape, model.config.hidden_size
    batch, past, capacity = 2, 5, 9
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(batch, 1, hidden_size, generator=generator)
    rotary = model.model.rotary_emb(torch.full((batch, 1), past), dtype=hidden.dtype)
    dynamic, storages = DynamicCache(), []
    for index in range(len(layout.layers)):
        keys, values = (torch.randn(batch, shape.kv_heads, past, shape.head_dim, generator=generator) for _ in "kv")
        dynamic.update(keys, values, index)
        pair = tuple(torch.zeros(batch, shape.kv_heads, capacity, shape.head_dim) for _ in "kv")
        pair[0][:, :, :past], pair[1][:, :, :past] = keys, values
        storages.append(pair)
    with torch.no_grad():
        expected = hidden
        for layer in layout.layers:
            expected, _ = layer(expected, rotary, None, False, dynamic, sdpa_attention)
        got = step(hidden, *rotary, visible_storage(capacity, past, None, hidden), storages, past)
    assert_close(got, expected, rtol=1e-4, atol=1e-4)
    for index, (keys, values) in enumerate(storages):
        assert_close(keys[:, :, : past + 1], dynamic[index][0], rtol=1e-4, atol=1e-4)
        assert_close(values[:, :, : past + 1], dynamic[index][1], rtol=1e-4, atol=1e-4)

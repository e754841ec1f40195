"""What ``generate`` does on a quantized model without being asked: the native step into a static cache.

Where the call allows it (one sequence per row, no assistant, no attentions or hidden states, no cache of the
caller's) every token after the prompt goes through ``mfquant::decoder_step``; elsewhere, and where the caller
chose otherwise (``cache_implementation="dynamic"``, ``compile_config=False``), the eager path runs as before.
The tokens are the de-quantised float model's greedy tokens, up to a near tie (the numeric policy).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoModelForCausalLM, GenerationError, Int4Config, Int8Config
from microformers_quant import decoder_step, kernels
from microformers_quant.modules import QuantEmbedding, QuantLinear
from microformers_sdk.cache import DynamicCache, StaticCache
from microformers_sdk.testing import assert_similar_generation

from .markers import needs_quant_kernels

IDS = torch.tensor([[1, 5, 9, 33, 40, 7, 60, 11]])
GREEDY = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}
SCORED = {"return_dict_in_generate": True, "output_scores": True}
EAGER = {"compile_config": False}  # the caller's explicit choice: no decode step of any kind


def count_native_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The position each native step wrote, in order."""
    calls: list[int] = []
    original = decoder_step.QuantDecoderStep.__call__

    def counted(self: Any, *args: Any) -> torch.Tensor:
        calls.append(args[-1])
        return original(self, *args)

    monkeypatch.setattr(decoder_step.QuantDecoderStep, "__call__", counted)
    return calls


def dequantised(quantized: Any, float_folder: Path) -> Any:
    """The float model holding exactly the quantized model's weights (each layer's ``dequantize()``)."""
    model = AutoModelForCausalLM.from_pretrained(float_folder)
    with torch.no_grad():
        for name, module in quantized.named_modules():
            if isinstance(module, (QuantLinear, QuantEmbedding)):
                model.get_submodule(name).weight.copy_(module.dequantize())
    return model


@needs_quant_kernels
@pytest.mark.parametrize("config", [Int4Config(group_size=32), Int8Config()], ids=["int4", "int8"])
def test_default_generate_decodes_natively_into_a_static_cache(
    config: Any, tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=config)
    calls = count_native_calls(monkeypatch)
    got = model.generate(IDS, **GREEDY, **SCORED)
    prompt = IDS.shape[1]
    # the prompt (at position 0), then every token after it
    assert calls == [0, *range(prompt, prompt + GREEDY["max_new_tokens"] - 1)]
    assert isinstance(got.past_key_values, StaticCache)
    assert "_compiled_decode_step" not in model.__dict__  # installed for the call only
    # the de-quantised float model's greedy tokens (other kernels: up to a near tie of its scores)
    expected = dequantised(model, tiny_llama).generate(IDS, **GREEDY, **SCORED)
    assert_similar_generation(got.sequences, expected.sequences, expected.scores, prompt_length=prompt)


@needs_quant_kernels
def test_default_sampling_and_a_padded_batch_decode_natively(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    ids = torch.tensor([[0, 0, 0, 5, 9, 33, 40, 7], [1, 5, 9, 33, 40, 7, 60, 11]])
    mask = (ids != 0).long()
    eager = model.generate(ids, attention_mask=mask, **GREEDY, **SCORED, **EAGER)
    calls = count_native_calls(monkeypatch)
    got = model.generate(ids, attention_mask=mask, **GREEDY, **SCORED)
    assert len(calls) == GREEDY["max_new_tokens"] - 1
    assert_similar_generation(got.sequences, eager.sequences, eager.scores, prompt_length=ids.shape[1])
    calls.clear()
    torch.manual_seed(0)
    model.generate(IDS, max_new_tokens=5, min_new_tokens=5, do_sample=True, top_k=5)
    assert len(calls) == 5  # one row: the prompt too


@needs_quant_kernels
@pytest.mark.parametrize(
    "choice",
    [{"cache_implementation": "dynamic"}, {"compile_config": False}],
    ids=["dynamic-cache", "compile_config-False"],
)
def test_the_callers_choice_decodes_eagerly(
    choice: dict[str, Any], tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    calls = count_native_calls(monkeypatch)
    out = model.generate(IDS, **GREEDY, **SCORED, **choice)
    assert calls == []
    cache_type = StaticCache if choice.get("cache_implementation") == "static" else DynamicCache
    assert isinstance(out.past_key_values, cache_type)


@needs_quant_kernels
@pytest.mark.parametrize(
    "settings",
    [{"num_beams": 2}, {"output_attentions": True}, {"output_hidden_states": True}, {"prompt_lookup_num_tokens": 2}],
    ids=["beams", "attentions", "hidden-states", "prompt-lookup"],
)
def test_where_it_does_not_apply_generate_runs_as_without_it(
    settings: dict[str, Any], tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    calls = count_native_calls(monkeypatch)
    got = model.generate(IDS, **GREEDY, **SCORED, **settings)
    want = model.generate(IDS, **GREEDY, **SCORED, **settings, **EAGER)
    assert calls == []
    assert not isinstance(got.past_key_values, StaticCache)
    # exactly equal: both calls run the same eager code on the same inputs
    assert torch.equal(got.sequences, want.sequences)


@needs_quant_kernels
def test_an_assistant_model_runs_as_without_it(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    assistant = AutoModelForCausalLM.from_pretrained(tiny_llama)
    calls = count_native_calls(monkeypatch)
    got = model.generate(IDS, assistant_model=assistant, **GREEDY)
    want = model.generate(IDS, assistant_model=assistant, **GREEDY, **EAGER)
    assert calls == []
    assert torch.equal(got, want)  # exactly equal: the same eager code on the same inputs


@needs_quant_kernels
def test_the_step_follows_the_model_between_calls(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Built for each call from the model as it is: a hook added after a first call runs at every step."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config())
    calls = count_native_calls(monkeypatch)
    model.generate(IDS, **GREEDY)
    assert len(calls) == GREEDY["max_new_tokens"]  # the prompt and every token after it
    seen: list[int] = []
    model.model.layers[1].mlp.down_proj.register_forward_hook(lambda *_: seen.append(1))
    calls.clear()
    model.generate(IDS, **GREEDY)
    assert calls == [] and len(seen) == GREEDY["max_new_tokens"]  # the prompt and every step, eagerly


@needs_quant_kernels
def test_a_step_the_user_installed_is_kept(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    model.compile_decode_step()
    installed = model.__dict__["_compiled_decode_step"]
    calls = count_native_calls(monkeypatch)
    model.generate(IDS, **GREEDY)
    assert len(calls) == GREEDY["max_new_tokens"]  # the prompt and every token after it
    assert model.__dict__["_compiled_decode_step"] is installed


def test_a_float_model_takes_no_quantized_step(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A float model decodes through the SDK's float step (or eagerly), never this plugin's."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    calls = count_native_calls(monkeypatch)
    model.generate(IDS, **GREEDY, **SCORED)
    assert calls == []
    out = model.generate(IDS, **GREEDY, **SCORED, cache_implementation="dynamic")
    assert calls == [] and isinstance(out.past_key_values, DynamicCache)


def test_a_model_on_the_meta_device_is_refused(tiny_llama: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    with pytest.raises(GenerationError, match=r"meta device.*from_pretrained"):
        model.to("meta").generate(IDS, **GREEDY)


def test_quantized_layers_off_the_cpu_say_they_are_slow(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Off the CPU (CUDA) the layers de-quantise on every call and no native step exists: one warning says so."""
    monkeypatch.setattr(kernels, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="microformers"):
        kernels.warn_slow_path(torch.device("cuda", 0))
        kernels.warn_slow_path(torch.device("cuda", 1))
        kernels.warn_slow_path(torch.device("meta"))  # generate() refuses meta weights with its own error
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1
    assert "cuda:0 have no native kernel" in messages[0] and "model.to('cpu')" in messages[0]


def test_the_native_step_is_not_built_off_the_cpu(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The step builder sees where the weights are: anywhere but the CPU it warns and builds nothing."""
    from microformers_sdk.decode_steps import default_decode_step

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=32))
    monkeypatch.setattr(kernels, "native_available", lambda: True)
    monkeypatch.setattr(kernels, "_warned", set())
    fake = torch.device("cuda", 0)
    original = QuantLinear.__getattr__

    def on_cuda(self: Any, name: str) -> Any:  # the weights as a CUDA model would report them
        value = original(self, name)
        return _Placed(value, fake) if name == "qweight" else value

    monkeypatch.setattr(QuantLinear, "__getattr__", on_cuda)
    with caplog.at_level(logging.WARNING, logger="microformers"):
        assert default_decode_step(model) is None
    assert any("cuda:0 have no native kernel" in record.getMessage() for record in caplog.records)


class _Placed:
    """A stand-in tensor that reports another device."""

    def __init__(self, tensor: torch.Tensor, device: torch.device) -> None:
        self.tensor, self.device = tensor, device

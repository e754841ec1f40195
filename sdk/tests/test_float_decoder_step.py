"""The SDK's float32 decoder step (``mfsdk::float_decoder_step`` through ``FloatDecoderStep``): the same logits
and cache writes as the eager static step, what ``generate`` runs by default for a float32 Llama-shaped model,
and never built where it could compute something else (hooks, adapters, other dtypes)."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
import torch
from torch import nn

from microformers_llama.configuration_llama import LlamaConfig
from microformers_llama.configuration_qwen2 import Qwen2Config
from microformers_llama.modeling_llama import LlamaForCausalLM
from microformers_llama.modeling_qwen2 import Qwen2ForCausalLM
from microformers_sdk import native
from microformers_sdk.decode_steps import NativeDecodeStep, decoding_with, default_decode_step
from microformers_sdk.static_steps import FloatDecoderStep, native_decoder_step
from microformers_sdk.testing import assert_close, assert_similar_generation
from microformers_sdk.testing.fixtures import needs_native_ops

pytestmark = needs_native_ops()

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
SCORED = {"return_dict_in_generate": True, "output_scores": True}


def tiny(cls: type = LlamaForCausalLM, config_cls: type = LlamaConfig, **overrides: Any) -> Any:
    torch.manual_seed(0)
    model = cls(config_cls(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0, 0.3)
            else:
                param.uniform_(0.5, 1.5)  # norm weights other than one, so a dropped weight shows
    return model


def _count_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each native step that ran (returned logits, not None)."""
    calls: list[int] = []
    original = FloatDecoderStep.__call__

    def counting(self: FloatDecoderStep, *args: Any) -> Any:
        out = original(self, *args)
        if out is not None:
            calls.append(args[0].shape[0])
        return out

    monkeypatch.setattr(FloatDecoderStep, "__call__", counting)
    return calls


def _step(model: Any) -> NativeDecodeStep:
    step = default_decode_step(model, float_layers=True)
    assert step is not None and isinstance(step.layers_step, FloatDecoderStep)
    return step


@pytest.mark.parametrize(("cls", "config_cls"), [(LlamaForCausalLM, LlamaConfig), (Qwen2ForCausalLM, Qwen2Config)])
@pytest.mark.parametrize("rows", [1, 3])
def test_one_step_gives_the_eager_static_steps_logits_and_cache(
    cls: type, config_cls: type, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen2 has q/k/v biases; three rows are left-padded (a padded row attends only to its own tokens)."""
    model = tiny(cls, config_cls)
    ran = _count_steps(monkeypatch)
    torch.manual_seed(1)
    ids = torch.randint(2, 64, (rows, 6))
    mask = torch.ones(rows, 6, dtype=torch.long)
    if rows > 1:
        mask[1, :2] = 0
        mask[2, :4] = 0
    cache = model.make_static_cache(12)
    with torch.no_grad():
        model(ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        eager_cache, native_cache = cache, copy.deepcopy(cache)
        step_ids, step_mask = (
            torch.randint(2, 64, (rows, 1)),
            torch.cat([mask, torch.ones(rows, 1, dtype=torch.long)], 1),
        )
        for _ in range(3):  # three steps: the later ones attend over what the step itself wrote
            eager = model(step_ids, attention_mask=step_mask, past_key_values=eager_cache, use_cache=True).logits
            runner = _step(model)
            with decoding_with(model, runner):
                ours = model(step_ids, attention_mask=step_mask, past_key_values=native_cache, use_cache=True).logits
            assert ran == [rows]  # the native step ran (it did not hand the step back to the eager path)
            ran.clear()
            assert_close(ours, eager)
            assert native_cache.get_seq_length() == eager_cache.get_seq_length()
            for layer in range(len(model.model.layers)):
                assert_close(native_cache.layer_storage(layer), eager_cache.layer_storage(layer))
            step_ids = eager[:, -1:].argmax(-1)
            step_mask = torch.cat([step_mask, torch.ones(rows, 1, dtype=torch.long)], 1)


def test_generate_takes_it_by_default_with_the_eager_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny()
    calls = _count_steps(monkeypatch)
    ids = torch.tensor([[5, 9, 33, 40, 7], [2, 2, 8, 12, 40]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    greedy = {"max_new_tokens": 10, "min_new_tokens": 10, "do_sample": False}
    ours = model.generate(ids, attention_mask=mask, **greedy, **SCORED)
    assert calls == [2] * 9  # every step after the prompt
    eager = model.generate(ids, attention_mask=mask, cache_implementation="dynamic", **greedy, **SCORED)
    assert len(calls) == 9
    assert_similar_generation(ours.sequences, eager.sequences, eager.scores, prompt_length=5)
    assert_close(ours.scores[0], eager.scores[0])


def _prefill_twice(model: Any, ids: torch.Tensor, native: bool) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """Two prompt chunks into one static cache with only their last logits asked for (generate's prefill), under
    the native step or eagerly: the second chunk continues the cache the first filled."""
    cache = model.make_static_cache(16)
    runner = _step(model) if native else None
    with torch.no_grad(), decoding_with(model, runner) if native else contextlib.nullcontext():
        first = model(ids[:, :5], past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        second = model(ids[:, 5:], past_key_values=cache, use_cache=True, logits_to_keep=1).logits
    return first, second, cache


def test_a_prompt_runs_through_the_step_like_the_eager_prefill(monkeypatch: pytest.MonkeyPatch) -> None:
    """One row of several tokens into a static cache, last logits only: one native call per chunk, each token
    attending causally (the same last logits and cached keys and values as the eager forward)."""
    model = tiny()
    ids = torch.randint(2, 64, (1, 9), generator=torch.Generator().manual_seed(4))
    ran = _count_steps(monkeypatch)
    ours = _prefill_twice(model, ids, native=True)
    assert ran == [5, 4]
    eager = _prefill_twice(model, ids, native=False)
    assert ran == [5, 4]  # nothing more: the eager forward ran the second time
    assert_close(ours[0], eager[0])
    assert_close(ours[1], eager[1])
    assert ours[2].get_seq_length() == eager[2].get_seq_length() == 9
    for layer in range(len(model.model.layers)):
        assert_close(ours[2][layer], eager[2][layer])


def test_prompts_the_step_does_not_take_run_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch, padding, more tokens than the few-row products take, every position's logits: the eager forward."""
    model = tiny()
    ran = _count_steps(monkeypatch)
    ids = torch.randint(2, 64, (2, 6), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), decoding_with(model, _step(model)):
        for kwargs in (
            {"input_ids": ids},
            {"input_ids": ids[:1], "attention_mask": torch.tensor([[0, 1, 1, 1, 1, 1]])},
            {"input_ids": ids[:1], "logits_to_keep": 0},
        ):
            cache = model.make_static_cache(16)
            model(past_key_values=cache, use_cache=True, **{"logits_to_keep": 1, **kwargs})
            assert cache.get_seq_length() == 6
        monkeypatch.setattr(native, "FEW_ROWS_MAX", 4)
        logits = model(ids[:1], past_key_values=model.make_static_cache(16), use_cache=True, logits_to_keep=1).logits
    assert ran == []
    assert logits.shape == (1, 1, TINY["vocab_size"])


def test_more_rows_than_the_few_row_products_take_run_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above FEW_ROWS_MAX rows the eager step's products are torch's: the step hands those back (None)."""
    model = tiny()
    monkeypatch.setattr(native, "FEW_ROWS_MAX", 2)
    ids = torch.randint(2, 64, (3, 4), generator=torch.Generator().manual_seed(3))
    greedy = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False}
    step = _step(model)
    hidden = torch.zeros(3, 1, TINY["hidden_size"])
    cos = torch.ones(1, 1, TINY["hidden_size"] // TINY["num_attention_heads"])
    assert step.layers_step(hidden, cos, cos, torch.ones(1, 1, 1, 8, dtype=torch.bool), [], 0) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the eager step's products would be bfloat16 ones
        assert step.layers_step(hidden[:1], cos, cos, torch.ones(1, 1, 1, 8, dtype=torch.bool), [], 0) is None
    ours = model.generate(ids, **greedy, **SCORED)
    eager = model.generate(ids, cache_implementation="dynamic", **greedy, **SCORED)
    assert_similar_generation(ours.sequences, eager.sequences, eager.scores, prompt_length=4)


class _Adapter(nn.Linear):
    """A subclass stands for any layer that computes more than its weight (LoRA, quantization)."""


def test_it_is_not_built_where_it_could_differ() -> None:
    model = tiny()
    assert default_decode_step(model) is None  # only asked for (generate asks)
    _step(model)
    layer = model.model.layers[1]
    for module in (layer.mlp.down_proj, layer.post_attention_layernorm, layer.self_attn, layer):
        handle = module.register_forward_hook(lambda *_: None)
        assert default_decode_step(model, float_layers=True) is None, module
        handle.remove()
    handle = layer.input_layernorm.register_forward_pre_hook(lambda *_: None)
    assert default_decode_step(model, float_layers=True) is None
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda *_: None)
    try:
        assert default_decode_step(model, float_layers=True) is None
    finally:
        handle.remove()
    _step(model)  # every hook gone: built again

    adapted = tiny()
    old = adapted.model.layers[2].self_attn.v_proj
    adapted.model.layers[2].self_attn.v_proj = _Adapter(old.in_features, old.out_features, bias=False)
    assert default_decode_step(adapted, float_layers=True) is None

    assert default_decode_step(tiny().to(torch.bfloat16), float_layers=True) is None
    parts = [layer.step_parts() for layer in model.model.layers]
    layout = model.decode_step_layout()
    step = native_decoder_step(parts, layout.shape)  # without the head: hidden states out
    assert isinstance(step, FloatDecoderStep) and step.head == []
    other_eps = tiny()
    other_eps.model.layers[0].input_layernorm.variance_epsilon = 1e-3
    assert default_decode_step(other_eps, float_layers=True) is None


def test_a_head_it_cannot_run_leaves_the_head_eager() -> None:
    model = tiny()
    handle = model.lm_head.register_forward_hook(lambda *_: None)  # the eager head then runs it
    step = default_decode_step(model, float_layers=True)
    assert step is not None and not step.includes_head
    handle.remove()
    model.lm_head = _Adapter(model.lm_head.in_features, model.lm_head.out_features, bias=False)
    step = default_decode_step(model, float_layers=True)
    assert step is not None and not step.includes_head


def test_the_step_needs_the_native_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "native_ops_available", lambda: False)
    assert default_decode_step(tiny(), float_layers=True) is None

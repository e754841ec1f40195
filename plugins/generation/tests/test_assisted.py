"""Assisted and prompt-lookup decoding: the tokens (and scores) of plain greedy search, in fewer model calls."""

from __future__ import annotations

import pytest
import torch
from generation_similarity import assert_same_generation

import microformers
from microformers import GenerationError


@pytest.fixture(scope="module")
def twin(llama_folder):
    """A second copy of the model: as an assistant, every draft is right."""
    return microformers.AutoModelForCausalLM.from_pretrained(llama_folder)


@pytest.fixture(scope="module")
def small_assistant(tmp_path_factory):
    import transformers

    torch.manual_seed(1)
    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    folder = tmp_path_factory.mktemp("assistant")
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return microformers.AutoModelForCausalLM.from_pretrained(folder)


DRAFTING = {
    "prompt_lookup_num_tokens",
    "max_matching_ngram_size",
    "assistant_model",
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
}


def count_calls(model):
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    return calls, handle


@pytest.mark.parametrize(
    "settings",
    [
        {"prompt_lookup_num_tokens": 3},
        {"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 1, "repetition_penalty": 1.3},
        {"assistant": "small", "num_assistant_tokens": 4},
        {"assistant": "small", "num_assistant_tokens_schedule": "heuristic", "assistant_confidence_threshold": 0.2},
        {"assistant": "twin", "num_assistant_tokens": 3, "no_repeat_ngram_size": 2},
    ],
)
def test_same_tokens_and_scores_as_greedy(model, twin, small_assistant, prompts, settings):
    settings = dict(settings)
    which = settings.pop("assistant", None)
    if which:
        settings["assistant_model"] = twin if which == "twin" else small_assistant
    # a prompt that repeats itself, so that looking it up proposes something
    ids = prompts["single"]["input_ids"].repeat(1, 2)
    for eos in (2, model.generate(ids, max_new_tokens=7)[0, -1].item()):  # the second one stops it early
        kwargs = {"max_new_tokens": 10, "eos_token_id": eos, "return_dict_in_generate": True, "output_scores": True}
        expected = model.generate(ids, **kwargs, **{k: v for k, v in settings.items() if k not in DRAFTING})
        ours = model.generate(ids, **kwargs, **settings)
        # drafts are verified several tokens at a time, plain greedy one: other matrix shapes, so the same tokens
        # up to a near tie, and the same scores while they agree
        assert_same_generation(ours, expected, prompt_length=ids.shape[1], rtol=1e-4, atol=1e-4)


def test_prompt_lookup_matches_reference(model, reference_model, prompts):
    ids = prompts["single"]["input_ids"].repeat(1, 3)
    kwargs = {"max_new_tokens": 12, "prompt_lookup_num_tokens": 4, "do_sample": False}
    kwargs.update(return_dict_in_generate=True, output_scores=True)
    # two libraries' kernels: the same tokens up to a near tie
    assert_same_generation(
        model.generate(ids, **kwargs), reference_model.generate(ids, **kwargs), prompt_length=ids.shape[1]
    )


def test_a_perfect_assistant_saves_model_calls(model, twin, prompts):
    calls, handle = count_calls(model)
    try:
        out = model.generate(
            **prompts["single"],
            max_new_tokens=12,
            assistant_model=twin,
            num_assistant_tokens=5,
            assistant_confidence_threshold=0.0,  # draft all 5 however unsure the (random) assistant is
        )
    finally:
        handle.remove()
    assert out.shape[1] == 8 + 12
    assert len(calls) == 2  # two rounds of (5 accepted drafts + the model's own token)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"do_sample": True}, "greedy"),
        ({"num_beams": 2}, "greedy"),
        ({"prompt_lookup_num_tokens": 0}, "prompt_lookup_num_tokens"),
        ({"batch": True}, "batch size 1"),
        ({"num_assistant_tokens_schedule": "sometimes", "assistant": True}, "num_assistant_tokens_schedule"),
        ({"return_dict_in_generate": True, "output_attentions": True}, "output_attentions"),
        ({"return_dict_in_generate": True, "output_hidden_states": True, "assistant": True}, "output_hidden_states"),
    ],
)
def test_unsupported_combinations_are_clear_errors(model, twin, prompts, kwargs, named):
    kwargs = {"prompt_lookup_num_tokens": 3, **kwargs}
    inputs = prompts["batch"] if kwargs.pop("batch", False) else prompts["single"]
    if kwargs.pop("assistant", False):
        kwargs.pop("prompt_lookup_num_tokens")
        kwargs["assistant_model"] = twin
    with pytest.raises(GenerationError, match=named):
        model.generate(**inputs, max_new_tokens=4, **kwargs)

"""Token parity with the reference implementation (transformers' generate) on a tiny random Llama."""

from __future__ import annotations

import pytest
import torch
from generation_similarity import assert_same_generation

from microformers import set_seed
from microformers_sdk.testing import assert_close

SCORED = {"return_dict_in_generate": True, "output_scores": True}


@pytest.mark.parametrize("which", ["single", "batch"])
def test_greedy_matches_reference(model, reference_model, prompts, which):
    inputs = prompts[which]
    expected = reference_model.generate(**inputs, max_new_tokens=16, do_sample=False, **SCORED)
    ours = model.generate(**inputs, max_new_tokens=16, **SCORED)
    # two libraries' kernels: the same tokens up to a near tie, the same scores while they agree
    assert_same_generation(ours, expected, prompt_length=inputs["input_ids"].shape[1], pad_token_id=0)


@pytest.mark.parametrize("which", ["single", "batch"])
@pytest.mark.parametrize(
    "settings",
    [
        {"num_beams": 4, "length_penalty": 0.6, "num_return_sequences": 2},
        {"num_beams": 4, "length_penalty": 1.8, "num_return_sequences": 2, "early_stopping": True},
        {"num_beams": 3, "length_penalty": 1.5, "early_stopping": "never"},
    ],
)
def test_beam_search_matches_reference(model, reference_model, prompts, which, settings):
    inputs = prompts[which]
    # several eos ids the model really produces, so beams finish at different lengths
    eos = model.generate(**prompts["single"], max_new_tokens=6)[0, -6:].tolist()[1:4:2]
    kwargs = {
        **settings,
        "eos_token_id": eos,
        "max_new_tokens": 12,
        "return_dict_in_generate": True,
        "output_scores": True,
    }
    expected = reference_model.generate(**inputs, **kwargs)
    ours = model.generate(**inputs, **kwargs)
    # two libraries' kernels: the same beams up to a near tie; where identical, the same beam indices and scores
    if assert_same_generation(ours, expected, prompt_length=inputs["input_ids"].shape[1], pad_token_id=0, beams=True):
        assert_close(ours.scores[-1], expected.scores[-1])


@pytest.mark.parametrize("which", ["single", "batch"])
def test_processed_greedy_matches_reference(model, reference_model, prompts, which):
    kwargs = {
        "max_new_tokens": 14,
        "repetition_penalty": 1.4,
        "no_repeat_ngram_size": 2,
        "min_new_tokens": 5,
        "bad_words_ids": [[7], [9, 10]],
        "return_dict_in_generate": True,
        "output_scores": True,
        "output_logits": True,
    }
    expected = reference_model.generate(**prompts[which], **kwargs)
    ours = model.generate(**prompts[which], **kwargs)
    # two libraries' kernels: the same tokens up to a near tie, the same scores and logits while they agree
    prompt_length = prompts[which]["input_ids"].shape[1]
    assert_same_generation(ours, expected, prompt_length=prompt_length, pad_token_id=0)
    agreed = [
        bool(torch.equal(ours.sequences[:, : prompt_length + s], expected.sequences[:, : prompt_length + s]))
        for s in range(len(expected.logits))
    ]
    for step, (mine, theirs) in enumerate(zip(ours.logits, expected.logits)):
        if agreed[step]:
            assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


def test_sampling_with_a_seed_is_reproducible_and_matches_reference(model, reference_model, prompts):
    kwargs = {"do_sample": True, "temperature": 0.8, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "max_new_tokens": 12}
    set_seed(11)
    first = model.generate(**prompts["batch"], **kwargs, **SCORED)
    set_seed(11)
    second = model.generate(**prompts["batch"], **kwargs, **SCORED)
    set_seed(11)
    reference = reference_model.generate(**prompts["batch"], **kwargs, **SCORED)
    set_seed(12)
    other_seed = model.generate(**prompts["batch"], **kwargs)
    assert torch.equal(first.sequences, second.sequences)  # exact: same eager path, same shapes, same seed, run twice
    # two libraries' kernels: the same draws up to a near tie of the (warped) scores
    assert_same_generation(first, reference, prompt_length=prompts["batch"]["input_ids"].shape[1], pad_token_id=0)
    assert not torch.equal(first.sequences, other_seed)


def test_sampling_several_return_sequences(model, prompts):
    set_seed(3)
    out = model.generate(**prompts["single"], do_sample=True, num_return_sequences=3, max_new_tokens=10)
    assert out.shape[0] == 3
    assert len({tuple(row) for row in out.tolist()}) > 1


def test_beam_sampling_matches_reference(model, reference_model, prompts):
    kwargs = {"do_sample": True, "num_beams": 3, "top_k": 10, "max_new_tokens": 8, **SCORED}
    set_seed(5)
    ours = model.generate(**prompts["batch"], **kwargs)
    set_seed(5)
    expected = reference_model.generate(**prompts["batch"], **kwargs)
    # two libraries' kernels: the same beams up to a near tie
    assert_same_generation(
        ours, expected, prompt_length=prompts["batch"]["input_ids"].shape[1], pad_token_id=0, beams=True
    )


def test_unknown_keyword_is_refused_like_the_reference(model, reference_model, prompts):
    with pytest.raises(ValueError, match="max_new_tokenz"):
        reference_model.generate(**prompts["single"], max_new_tokenz=3)
    with pytest.raises(ValueError, match="max_new_tokenz"):
        model.generate(**prompts["single"], max_new_tokenz=3)

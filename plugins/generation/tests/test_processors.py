"""Each processor gives the reference's processed scores on the same logits."""

from __future__ import annotations

import pytest
import torch
from transformers.generation import logits_process as reference

from microformers import GenerationError
from microformers_generation import (
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

VOCAB = 50


@pytest.fixture
def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    input_ids = torch.randint(0, 12, (4, 9), generator=generator)  # small ids: many repeats and n-grams
    input_ids[0] = torch.tensor([3, 4, 5, 8, 3, 4, 6, 3, 4])  # the last 2- and 3-grams' prefixes occurred before
    scores = torch.randn(4, VOCAB, generator=generator) * 3
    scores[0, :5] = 10.0  # ties at the top
    return input_ids, scores


CASES = [
    (lambda: TemperatureLogitsWarper(0.7), lambda: reference.TemperatureLogitsWarper(0.7)),
    (lambda: TopKLogitsWarper(5), lambda: reference.TopKLogitsWarper(5)),
    (lambda: TopKLogitsWarper(3, min_tokens_to_keep=6), lambda: reference.TopKLogitsWarper(3, min_tokens_to_keep=6)),
    (lambda: TopPLogitsWarper(0.8), lambda: reference.TopPLogitsWarper(0.8)),
    (
        lambda: TopPLogitsWarper(0.1, min_tokens_to_keep=3),
        lambda: reference.TopPLogitsWarper(0.1, min_tokens_to_keep=3),
    ),
    (lambda: MinPLogitsWarper(0.1), lambda: reference.MinPLogitsWarper(0.1)),
    (
        lambda: MinPLogitsWarper(0.9, min_tokens_to_keep=2),
        lambda: reference.MinPLogitsWarper(0.9, min_tokens_to_keep=2),
    ),
    (lambda: TypicalLogitsWarper(0.6), lambda: reference.TypicalLogitsWarper(0.6)),
    (lambda: RepetitionPenaltyLogitsProcessor(1.5), lambda: reference.RepetitionPenaltyLogitsProcessor(1.5)),
    (lambda: RepetitionPenaltyLogitsProcessor(0.6), lambda: reference.RepetitionPenaltyLogitsProcessor(0.6)),
    (
        lambda: RepetitionPenaltyLogitsProcessor(1.3, prompt_ignore_length=torch.tensor([0, 2, 4, 9])),
        lambda: reference.RepetitionPenaltyLogitsProcessor(1.3, prompt_ignore_length=torch.tensor([0, 2, 4, 9])),
    ),
    (lambda: NoRepeatNGramLogitsProcessor(2), lambda: reference.NoRepeatNGramLogitsProcessor(2)),
    (lambda: NoRepeatNGramLogitsProcessor(3), lambda: reference.NoRepeatNGramLogitsProcessor(3)),
    (
        lambda: NoBadWordsLogitsProcessor([[3], [5, 7], [1, 2, 8], [2]], eos_token_id=2),
        lambda: reference.NoBadWordsLogitsProcessor([[3], [5, 7], [1, 2, 8], [2]], eos_token_id=2),
    ),
    (lambda: MinLengthLogitsProcessor(12, [2, 4]), lambda: reference.MinLengthLogitsProcessor(12, [2, 4])),
    (lambda: MinLengthLogitsProcessor(10, 2), lambda: reference.MinLengthLogitsProcessor(10, 2)),
    (
        lambda: MinNewTokensLengthLogitsProcessor(6, 4, [2, 3]),
        lambda: reference.MinNewTokensLengthLogitsProcessor(6, 4, [2, 3]),
    ),
    (lambda: SuppressTokensLogitsProcessor([1, 9]), lambda: reference.SuppressTokensLogitsProcessor([1, 9])),
]


@pytest.mark.parametrize(("ours", "theirs"), CASES, ids=lambda make: type(make()).__name__)
def test_processor_matches_reference(inputs, ours, theirs):
    input_ids, scores = inputs
    original = scores.clone()
    expected = theirs()(input_ids, scores.clone())
    result = ours()(input_ids, scores)
    torch.testing.assert_close(result, expected)
    assert torch.equal(scores, original)  # input left alone


def test_processors_change_something(inputs):
    input_ids, scores = inputs
    for make, _ in CASES:
        assert not torch.equal(make()(input_ids, scores), scores), type(make()).__name__


def test_eos_is_allowed_once_long_enough(inputs):
    input_ids, scores = inputs
    assert torch.equal(MinLengthLogitsProcessor(9, 2)(input_ids, scores), scores)
    assert torch.equal(MinNewTokensLengthLogitsProcessor(5, 4, 2)(input_ids, scores), scores)
    assert MinNewTokensLengthLogitsProcessor(6, 4, 2)(input_ids, scores)[:, 2].eq(-float("inf")).all()


def test_chained_warpers_match_reference(inputs):
    input_ids, scores = inputs
    ours = [TemperatureLogitsWarper(0.5), TopKLogitsWarper(20), TopPLogitsWarper(0.7), MinPLogitsWarper(0.05)]
    theirs = [
        reference.TemperatureLogitsWarper(0.5),
        reference.TopKLogitsWarper(20),
        reference.TopPLogitsWarper(0.7),
        reference.MinPLogitsWarper(0.05),
    ]
    mine, expected = scores, scores.clone()
    for processor, oracle in zip(ours, theirs):
        mine, expected = processor(input_ids, mine), oracle(input_ids, expected)
    torch.testing.assert_close(mine, expected)


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: TopPLogitsWarper(0.0), "top_p"),
        (lambda: TopPLogitsWarper(1.01), "top_p"),
        (lambda: TemperatureLogitsWarper(0.0), "do_sample=False"),
        (lambda: TopKLogitsWarper(0), "top_k"),
        (lambda: MinPLogitsWarper(-0.1), "min_p"),
        (lambda: TypicalLogitsWarper(1.5), "typical_p"),
        (lambda: RepetitionPenaltyLogitsProcessor(-1.0), "repetition_penalty"),
        (lambda: NoRepeatNGramLogitsProcessor(0), "no_repeat_ngram_size"),
        (lambda: NoBadWordsLogitsProcessor([[1, -2]]), "bad_words_ids"),
    ],
)
def test_bad_arguments_are_clear_errors(make, named):
    with pytest.raises(GenerationError, match=named):
        make()


def test_bad_word_outside_vocabulary(inputs):
    input_ids, scores = inputs
    with pytest.raises(GenerationError, match="vocabulary"):
        NoBadWordsLogitsProcessor([[VOCAB + 3]])(input_ids, scores)

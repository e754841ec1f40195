"""Each processor gives the reference's processed scores on the same logits; bad arguments are named, edge cases kept."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers.generation import logits_process as reference

from microformers import GenerationError
from microformers_generation import (
    EncoderNoRepeatNGramLogitsProcessor,
    LogitNormalization,
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
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


def test_processor_list_hands_each_processor_the_ids_with_extra_keywords() -> None:
    seen: list[torch.Tensor] = []

    def processor(input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        seen.append(input_ids)
        return scores + kwargs["shift"]

    ids = torch.tensor([[1, 2]])
    out = LogitsProcessorList([processor, processor])(ids, torch.zeros(1, 3), shift=1.0)
    # exact: 0 + 1 + 1 in floating point
    assert torch.equal(out, torch.full((1, 3), 2.0)) and all(x is ids for x in seen) and len(seen) == 2


def test_suppress_tokens_takes_a_list_of_ids() -> None:
    out = SuppressTokensLogitsProcessor([1, 3])(torch.tensor([[0]]), torch.zeros(1, 5))
    assert torch.isinf(out).nonzero()[:, 1].tolist() == [1, 3]


def test_token_id_zero_is_a_valid_end_of_sequence_id() -> None:
    # many vocabularies use id 0 for a special token; a list holding it is accepted and masked
    processor = MinLengthLogitsProcessor(5, [0, 3])
    out = processor(torch.tensor([[1, 2]]), torch.zeros(1, 6))
    assert torch.isneginf(out[0, [0, 3]]).all() and torch.equal(out[0, [1, 2, 4, 5]], torch.zeros(4))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: MinNewTokensLengthLogitsProcessor(-1, 2, 2), r"^prompt_length_to_skip=-1 must be an integer >= 0"),
        (lambda: MinNewTokensLengthLogitsProcessor(3, 2, [-1]), r"^eos_token_id=\[-1\] must be a token id"),
        (lambda: NoBadWordsLogitsProcessor([[5]], eos_token_id=[-2]), r"^eos_token_id=\[-2\] must be a token id"),
        (lambda: NoBadWordsLogitsProcessor([]), r"^bad_words_ids=\[\] must be a non-empty list"),
        (lambda: NoBadWordsLogitsProcessor(((5,),)), r"^bad_words_ids=\(\(5,\),\) must be a non-empty list"),
        (lambda: TypicalLogitsWarper(0.9, min_tokens_to_keep=0), r"^min_tokens_to_keep=0 must be an integer >= 1"),
        (lambda: TopKLogitsWarper(0), r"^top_k=0 must be an integer >= 1"),
        (lambda: SuppressTokensLogitsProcessor([-1]), r"^suppress_tokens=\[-1\] must be a token id"),
        (lambda: TopKLogitsWarper(5, min_tokens_to_keep=0), r"^min_tokens_to_keep=0 must be an integer >= 1"),
        (lambda: NoRepeatNGramLogitsProcessor(0), r"^no_repeat_ngram_size=0 must be an integer >= 1"),
        (lambda: MinPLogitsWarper(1.5), r"^min_p=1.5 must be in \[0, 1\]"),
        (
            lambda: SequenceBiasLogitsProcessor([[[100], 1.0], [[3, 120], 2.0]])(
                torch.tensor([[3]]), torch.zeros(1, 96)
            ),
            r"^sequence_bias names token ids \[100, 120\], outside the vocabulary of 96 ids",
        ),
    ],
)
def test_processor_setting_errors_name_the_setting_and_value(build: Any, message: str) -> None:
    with pytest.raises(GenerationError, match=message):
        build()


def test_bad_words_ban_single_tokens_and_word_endings_as_the_reference() -> None:
    import transformers  # the test oracle only

    words = [[5], [2], [3, 4]]  # [2] is the end token: never banned
    ids = torch.tensor([[7, 3], [3, 7]])
    scores = torch.zeros(2, 8)
    out = NoBadWordsLogitsProcessor(words, eos_token_id=2)(ids, scores.clone())
    assert torch.isinf(out).nonzero().tolist() == [[0, 4], [0, 5], [1, 5]]
    # exact: both only put -inf into a copy of the same scores
    assert torch.equal(out, transformers.NoBadWordsLogitsProcessor(words, eos_token_id=2)(ids, scores.clone()))


def test_min_p_keeps_only_the_best_token_by_default() -> None:
    import transformers  # the test oracle only

    scores = torch.tensor([[3.0, 0.0, -1.0, 2.9]])
    ids = torch.zeros(1, 1, dtype=torch.long)
    out = MinPLogitsWarper(0.99)(ids, scores.clone())
    assert torch.isinf(out).tolist() == [[False, True, True, True]]
    # exact: both only put -inf into a copy of the same scores
    assert torch.equal(out, transformers.MinPLogitsWarper(0.99)(ids, scores.clone()))


def test_logit_normalization_turns_each_row_into_log_probabilities() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]])
    out = LogitNormalization()(torch.zeros(2, 1, dtype=torch.long), scores)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2))
    torch.testing.assert_close(out, scores.log_softmax(-1))


def test_repetition_penalty_names_the_row_counts_of_a_wrong_prompt_ignore_length() -> None:
    processor = RepetitionPenaltyLogitsProcessor(1.5, prompt_ignore_length=torch.tensor([1, 2, 3]))
    with pytest.raises(GenerationError, match="prompt_ignore_length has 3 rows but the batch has 2"):
        processor(torch.tensor([[4, 5], [6, 7]]), torch.zeros(2, 8))


def test_typical_p_keeps_the_typical_tokens_of_a_single_row_as_the_reference() -> None:
    import transformers  # the test oracle only

    scores = torch.tensor([[2.0, 1.9, 1.8, 0.5, -1.0, 3.0, 0.0, 1.0]])
    expected = transformers.TypicalLogitsWarper(0.9)(torch.zeros(1, 1, dtype=torch.long), scores.clone())
    out = TypicalLogitsWarper(0.9)(torch.zeros(1, 1, dtype=torch.long), scores.clone())
    assert torch.equal(torch.isinf(out), torch.isinf(expected))
    assert (~torch.isinf(out)).sum() > 1


def test_encoder_no_repeat_ngram_with_a_prompt_shorter_than_the_ngram_bans_nothing() -> None:
    processor = EncoderNoRepeatNGramLogitsProcessor(3, torch.tensor([[4, 5]]))
    scores = torch.randn(1, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(processor(torch.tensor([[4, 5]]), scores.clone()), scores)  # exact: nothing banned, untouched

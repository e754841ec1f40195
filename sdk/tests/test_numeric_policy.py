"""The numeric policy: floats within a dtype's tolerance, generations equal up to a near tie."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from microformers_sdk.testing import assert_close, assert_similar_generation, tolerances


def test_float32_values_within_tolerance_pass_and_beyond_fail() -> None:
    expected = torch.tensor([1.0, -2.0, 5.252044866210781e-05])
    assert_close(expected + 1e-6, expected)
    with pytest.raises(AssertionError, match="1 of 3 values differ"):
        assert_close(expected + torch.tensor([0.0, 0.0, 1e-3]), expected)


def test_the_coarser_dtype_picks_the_tolerance() -> None:
    expected = torch.tensor([1.0, 2.0])
    assert_close((expected + 5e-3).to(torch.bfloat16), expected)
    with pytest.raises(AssertionError):
        assert_close(expected + 5e-3, expected)
    assert tolerances(torch.float16) == (1e-3, 1e-3)


def test_explicit_tolerances_override_the_defaults() -> None:
    assert_close(torch.tensor([1.0]), torch.tensor([1.01]), atol=0.02)
    with pytest.raises(AssertionError, match="rtol=0, atol=0"):
        assert_close(torch.tensor([1.0]), torch.tensor([1.0 + 2**-20]), rtol=0, atol=0)


def test_shapes_must_match() -> None:
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_close(torch.zeros(2, 3), torch.zeros(3, 2))


def test_integer_tensors_must_be_equal() -> None:
    assert_close(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]))
    with pytest.raises(AssertionError, match="1 of 3 integer values differ"):
        assert_close(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))


def test_nan_matches_nan_and_infinities_match_their_sign() -> None:
    values = torch.tensor([float("nan"), float("inf"), -float("inf")])
    assert_close(values, values.clone())
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([float("inf")]), torch.tensor([-float("inf")]))
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([float("nan")]), torch.tensor([0.0]))


def test_pipeline_shaped_outputs_compare_floats_by_tolerance_and_the_rest_exactly() -> None:
    batch = [{"score": 5.252044866210781e-05, "token": 7, "token_str": "cat"}]
    single = [{"score": 5.2520445024129e-05, "token": 7, "token_str": "cat"}]
    assert_close(batch, single)
    with pytest.raises(AssertionError, match=r"\[0\]\['token_str'\]"):
        assert_close(batch, [{**single[0], "token_str": "dog"}])
    with pytest.raises(AssertionError, match="keys differ"):
        assert_close(batch, [{"score": 5.2e-05, "token": 7}])
    with pytest.raises(AssertionError, match="lengths differ"):
        assert_close(batch, single * 2)
    with pytest.raises(AssertionError, match="score"):
        assert_close(batch, [{**single[0], "score": 0.5}])


def test_numpy_arrays_and_tensors_compare_with_each_other() -> None:
    assert_close(np.array([0.5, 0.25], dtype=np.float32), torch.tensor([0.5, 0.25 + 1e-7]))
    with pytest.raises(AssertionError, match="one side is a tensor"):
        assert_close([0.5], torch.tensor([0.5]))


def test_a_float_is_not_a_bool() -> None:
    with pytest.raises(AssertionError):
        assert_close(True, 1.0)


def test_identical_generations_pass_without_scores() -> None:
    assert_similar_generation(torch.tensor([[1, 2, 3]]), [[1, 2, 3]])
    with pytest.raises(AssertionError, match="no scores given"):
        assert_similar_generation(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 4]]))


def _scores(*rows: dict[int, float], vocab: int = 6) -> torch.Tensor:
    out = torch.full((len(rows), vocab), -10.0)
    for index, values in enumerate(rows):
        for token, score in values.items():
            out[index, token] = score
    return out


def test_generations_may_part_after_a_near_tie() -> None:
    # prompt [1]; step 0 chose 2 on both sides; step 1 was a near tie between 3 and 4
    scores = [_scores({2: 5.0}), _scores({3: 1.00000, 4: 0.99999})]
    assert_similar_generation([[1, 2, 3, 5, 5]], [[1, 2, 4, 0]], scores, prompt_length=1)


def test_generations_that_part_without_a_tie_fail() -> None:
    scores = [_scores({2: 5.0}), _scores({3: 1.0, 4: 0.5})]
    with pytest.raises(AssertionError, match="not a near tie"):
        assert_similar_generation([[1, 2, 3]], [[1, 2, 4]], scores, prompt_length=1)


def test_a_difference_inside_the_prompt_or_past_the_scores_fails() -> None:
    scores = [_scores({2: 5.0})]
    with pytest.raises(AssertionError, match="inside the prompt"):
        assert_similar_generation([[1, 2]], [[0, 2]], scores, prompt_length=1)
    with pytest.raises(AssertionError, match="scores cover only 1 steps"):
        assert_similar_generation([[1, 2, 3]], [[1, 2, 4]], scores, prompt_length=1)


def test_a_row_that_stopped_early_is_a_tie_between_the_end_token_and_the_other() -> None:
    eos = 0
    tied = [_scores({2: 5.0}), _scores({eos: 2.0, 3: 2.0 - 1e-6})]
    assert_similar_generation([[1, 2, eos, eos]], [[1, 2, 3, 3]], tied, prompt_length=1, pad_token_id=eos)
    clear = [_scores({2: 5.0}), _scores({eos: 2.0, 3: 1.0})]
    with pytest.raises(AssertionError, match="not a near tie"):
        assert_similar_generation([[1, 2, eos, eos]], [[1, 2, 3, 3]], clear, prompt_length=1, pad_token_id=eos)
    with pytest.raises(AssertionError, match="strict prefix"):
        assert_similar_generation([[1, 2]], [[1, 2, 3]], tied, prompt_length=1)


def test_row_counts_must_match_and_floats_are_refused() -> None:
    with pytest.raises(AssertionError, match="2 sequences vs 1"):
        assert_similar_generation([[1], [2]], [[1]])
    with pytest.raises(TypeError, match="token ids"):
        assert_similar_generation(torch.tensor([[1.0]]), [[1]])


def test_each_row_is_judged_by_its_own_scores() -> None:
    # row 0 identical; row 1 parts at a tie in its own scores, though row 0's scores for those tokens are far apart
    scores = [_scores({3: 9.0, 4: 1.0}, {3: 1.0, 4: 1.0})]
    assert_similar_generation([[1, 3], [1, 3]], [[1, 3], [1, 4]], scores, prompt_length=1)
    with pytest.raises(AssertionError, match="row 0"):
        assert_similar_generation([[1, 3], [1, 3]], [[1, 4], [1, 3]], scores, prompt_length=1)

"""Sampling settings whose scores overflow: a temperature so small that the scores turn to inf (1e-300) samples the
limit distribution (the most likely token), and any other row that is no distribution is a GenerationError naming
the settings, never torch.multinomial's RuntimeError (issue 42 item 8). The reference raises that RuntimeError."""

from __future__ import annotations

import pytest
import torch

from microformers import GenerationError
from microformers_generation import LogitsProcessor, LogitsProcessorList
from microformers_generation.logits_process import TemperatureLogitsWarper
from microformers_sdk.testing import assert_close, assert_similar_generation


@pytest.mark.parametrize("temperature", [1e-36, 1e-300, 5e-324])
def test_a_temperature_that_overflows_the_scores_samples_the_most_likely_tokens(model, prompts, temperature):
    greedy = model.generate(**prompts["batch"], max_new_tokens=6, do_sample=False, output_scores=True,
                            return_dict_in_generate=True)  # fmt: skip
    for seed in (0, 1):
        torch.manual_seed(seed)
        sampled = model.generate(**prompts["batch"], max_new_tokens=6, do_sample=True, temperature=temperature)
        assert_similar_generation(sampled, greedy.sequences, greedy.scores, prompt_length=8, pad_token_id=0)


def test_the_warper_keeps_rows_that_do_not_overflow_as_they_are():
    scores = torch.tensor([[1.0, -2.0, 0.5, float("-inf")], [30.0, 29.0, -1.0, 0.0], [-3.0, -4.0, -5.0, -6.0]])
    warped = TemperatureLogitsWarper(1e-37)(torch.zeros(3, 1, dtype=torch.long), scores)
    # row 0 stays finite at 1e-37 (1e37 < float32's 3.4e38): divided as the reference divides it
    assert_close(warped[0], scores[0] / 1e-37)
    # row 1's best overflows, row 2's scores all underflow to -inf: the best keeps all the probability
    for row in (1, 2):
        assert warped[row].softmax(-1).tolist() == [1.0, 0.0, 0.0, 0.0]  # exact: exp(0) and exp(-inf)
    tied = TemperatureLogitsWarper(1e-300)(torch.zeros(1, 1, dtype=torch.long), torch.tensor([[2.0, 2.0, 1.0]]))
    assert tied[0].softmax(-1).tolist() == [0.5, 0.5, 0.0]  # exact: ties share evenly


class _Poison(LogitsProcessor):
    """Scores as a model or a processor might leave them: one row entirely NaN."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()
        scores[1] = float("nan")
        return scores


@pytest.mark.parametrize("beams", [1, 2])
def test_rows_that_are_no_distribution_are_a_generation_error_naming_the_settings(model, prompts, beams):
    with pytest.raises(GenerationError, match=r"probabilities of row\(s\) .* are not finite .* with temperature=0\.5"):
        model.generate(
            **prompts["batch"], max_new_tokens=3, do_sample=True, temperature=0.5, num_beams=beams,
            logits_processor=LogitsProcessorList([_Poison()]),
        )  # fmt: skip


def test_a_tiny_repetition_penalty_that_overflows_is_a_generation_error(model, prompts):
    with pytest.raises(GenerationError, match=r"not finite .* repetition_penalty=1e-300"):
        model.generate(**prompts["single"], max_new_tokens=3, do_sample=True, repetition_penalty=1e-300)


def test_top_p_zero_is_refused_saying_what_to_use_instead(model, prompts):
    """The reference accepts top_p=0 and keeps only the best token; here, as in serve and chat, it is refused."""
    with pytest.raises(GenerationError, match=r"top_p=0\.0 must be in \(0, 1\].*use do_sample=False"):
        model.generate(**prompts["single"], max_new_tokens=2, do_sample=True, top_p=0.0)

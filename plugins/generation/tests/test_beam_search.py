"""Beam search: the same beams without the cache, early_stopping as in the reference."""

from __future__ import annotations

from typing import Any

import pytest
from generation_similarity import assert_same_generation


def test_beam_search_without_the_cache_gives_the_same_beams(model: Any, prompts: dict[str, Any]) -> None:
    kwargs = {"num_beams": 3, "max_new_tokens": 4, "num_return_sequences": 2}
    kwargs.update(return_dict_in_generate=True, output_scores=True)
    cached = model.generate(**prompts["batch"], **kwargs)
    uncached = model.generate(**prompts["batch"], **kwargs, use_cache=False)
    # without the cache every step reruns the whole sequence: other shapes, so the same beams up to a near tie
    assert_same_generation(uncached, cached, prompt_length=8, pad_token_id=0, beams=True)


@pytest.mark.parametrize("num_beams", [2, 3])
def test_beam_search_with_early_stopping_matches_the_reference(
    model: Any, reference_model: Any, prompts: dict[str, Any], num_beams: int
) -> None:
    # an end token the beams reach early, so that early_stopping decides when the search ends
    eos = int(reference_model.generate(**prompts["batch"], max_new_tokens=3, do_sample=False)[0, -2])
    kwargs = {
        "num_beams": num_beams,
        "early_stopping": True,
        "eos_token_id": eos,
        "max_new_tokens": 8,
        "return_dict_in_generate": True,
        "output_scores": True,
    }
    expected = reference_model.generate(**prompts["batch"], **kwargs)
    mine = model.generate(**prompts["batch"], **kwargs)
    # two libraries' kernels: the same beams up to a near tie (and then as many steps)
    assert_same_generation(mine, expected, prompt_length=8, pad_token_id=0, beams=True)

"""return_dict_in_generate outputs and compute_transition_scores, against the reference."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from generation_similarity import assert_same_generation, beam_row_scores, common_steps

from microformers import set_seed
from microformers_generation.outputs import compute_transition_scores
from microformers_sdk.testing import assert_close, assert_similar_generation


@pytest.fixture(scope="module")
def eager_reference(llama_folder):
    import transformers

    return transformers.LlamaForCausalLM.from_pretrained(llama_folder, attn_implementation="eager").eval()


def _assert_nested_close(ours, theirs):
    assert type(ours) is tuple and len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        if isinstance(reference, tuple):
            _assert_nested_close(mine, reference)
        else:
            assert mine.shape == reference.shape
            torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("settings", [{}, {"num_beams": 2}])
def test_attentions_and_hidden_states_match_reference(model, eager_reference, prompts, settings):
    kwargs = {
        **settings,
        "max_new_tokens": 4,
        "return_dict_in_generate": True,
        "output_attentions": True,
        "output_hidden_states": True,
        "output_logits": True,
    }
    # unpadded rows: what a model puts at padded positions is its own business, not generate()'s
    expected = eager_reference.generate(**prompts["single"], **kwargs)
    ours = model.generate(**prompts["single"], **kwargs)
    assert type(ours).__name__ == type(expected).__name__
    # two libraries' kernels: the same tokens up to a near tie of the logits; attentions and hidden states agree
    # for every step before the first difference (all of them where the tokens are the same)
    logits = beam_row_scores(ours, ours.logits) if "num_beams" in settings else ours.logits
    assert_similar_generation(ours.sequences, expected.sequences, logits, prompt_length=8)
    steps = common_steps(ours.sequences, expected.sequences, 8)
    if steps == len(expected.attentions):
        assert len(ours.attentions) == len(expected.attentions)
        assert len(ours.hidden_states) == len(expected.hidden_states)
    _assert_nested_close(ours.attentions[:steps], expected.attentions[:steps])
    _assert_nested_close(ours.hidden_states[:steps], expected.hidden_states[:steps])
    assert ours.scores is None and expected.scores is None


def test_outputs_are_none_unless_asked(model, prompts):
    out = model.generate(**prompts["single"], max_new_tokens=3, return_dict_in_generate=True)
    assert out.sequences.shape == (1, 11)
    assert (out.scores, out.logits, out.attentions, out.hidden_states) == (None, None, None, None)


@pytest.mark.parametrize(
    ("settings", "normalize"),
    [
        ({}, False),
        ({}, True),
        ({"do_sample": True, "top_k": 10, "temperature": 0.7}, False),
        ({"num_beams": 3, "num_return_sequences": 2}, True),
        ({"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.0}, False),
    ],
)
def test_transition_scores_match_reference(model, reference_model, prompts, settings, normalize):
    kwargs = {**settings, "max_new_tokens": 6, "return_dict_in_generate": True, "output_scores": True}
    set_seed(4)
    ours = model.generate(**prompts["batch"], **kwargs)
    set_seed(4)
    expected = reference_model.generate(**prompts["batch"], **kwargs)
    # two libraries' kernels: the same tokens up to a near tie; the transition scores need the same tokens
    identical = assert_same_generation(
        ours, expected, prompt_length=8, pad_token_id=0, beams="num_beams" in settings, rtol=1e-4, atol=1e-4
    )
    beams = {"beam_indices": expected.beam_indices} if "num_beams" in settings else {}
    theirs = reference_model.compute_transition_scores(
        expected.sequences, expected.scores, normalize_logits=normalize, **beams
    )
    mine_beams = {"beam_indices": ours.beam_indices} if "num_beams" in settings else {}
    mine = model.compute_transition_scores(ours.sequences, ours.scores, normalize_logits=normalize, **mine_beams)
    # the steps every row shares (all of them unless a near tie broke differently)
    steps = mine.shape[1] if identical else common_steps(ours.sequences, expected.sequences, 8)
    assert_close(mine[:, :steps], theirs[:, :steps], rtol=1.3e-6)  # torch.testing's fp32 rtol, as before
    if "num_beams" in settings and settings.get("length_penalty") == 0.0:
        # with no length penalty a beam's score is the sum of its transition scores
        torch.testing.assert_close(mine.sum(dim=1), ours.sequences_scores)


def test_generate_returns_the_cache_of_the_sequences(model: Any, prompts: dict[str, Any]) -> None:
    out = model.generate(**prompts["single"], max_new_tokens=3, return_dict_in_generate=True)
    assert out.past_key_values is not None
    assert out.past_key_values.get_seq_length() == out.sequences.shape[1] - 1


def test_generate_works_with_a_model_configured_to_return_tuples(
    model: Any, prompts: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = model.generate(**prompts["batch"], max_new_tokens=3)
    monkeypatch.setattr(model.config, "return_dict", False)
    # exact: the same eager path and shapes, run twice; only the container of the outputs differs
    assert torch.equal(model.generate(**prompts["batch"], max_new_tokens=3), expected)


def test_transition_scores_are_the_raw_scores_unless_normalised() -> None:
    scores = (torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0.5, 0.0, -1.0]]))
    sequences = torch.tensor([[7, 2, 0]])
    assert compute_transition_scores(None, sequences, scores).tolist() == [[3.0, 0.5]]  # exact: picked, not computed
    normalised = compute_transition_scores(None, sequences, scores, normalize_logits=True)
    torch.testing.assert_close(normalised, torch.stack([s.log_softmax(-1)[0, t] for s, t in zip(scores, (2, 0))])[None])

"""Assisted and prompt-lookup decoding: the tokens (and scores) of plain greedy search, in fewer model calls."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from generation_marked_tiny import marked_tiny as _marked_tiny
from generation_similarity import assert_same_generation

import microformers
from microformers import GenerationError
from microformers_generation.assisted import AssistantDrafts, PromptLookup
from microformers_sdk.testing import assert_similar_generation

NEG = float("-inf")


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


class _Cache:
    def __init__(self, length: int) -> None:
        self.length = length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length


class _CropCache(_Cache):
    def crop(self, length: int) -> None:
        self.length = length


class _ConstantAssistant:
    """An assistant whose next-token logits are always ``row``."""

    def __init__(self, row: list[float]) -> None:
        self.row = torch.tensor(row)

    def __call__(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: _CropCache | None,
        use_cache: bool,
        return_dict: bool,
    ) -> SimpleNamespace:
        past = 0 if past_key_values is None else past_key_values.length
        logits = self.row.expand(input_ids.shape[0], input_ids.shape[1], -1)
        return SimpleNamespace(logits=logits, past_key_values=_CropCache(past + input_ids.shape[1]))


def _unchanged(ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    return scores


@pytest.mark.parametrize(("threshold", "drafted"), [(0.5, 4), (0.6, 1)])
def test_confidence_threshold_ends_a_draft_only_below_it(threshold: float, drafted: int) -> None:
    # the assistant gives its token probability exactly 0.5: a threshold of 0.5 keeps drafting, 0.6 stops after it
    drafts = AssistantDrafts(_ConstantAssistant([0.0, 0.0, NEG, NEG]), 4, threshold, "constant", [], {})
    proposal = drafts.propose(torch.tensor([[1, 2, 3]]), 10, _unchanged)
    assert proposal.tolist() == [0] * drafted


def test_heuristic_schedule_shrinks_drafts_to_one_token_and_grows_them_by_two() -> None:
    drafts = AssistantDrafts(_ConstantAssistant([0.0, 1.0, NEG, NEG]), 2, None, "heuristic", [], {})
    sequence = torch.tensor([[1, 2, 3]])
    lengths = []
    for matched_all in (False, False, False, True):
        proposal = drafts.propose(sequence, 10, _unchanged)
        lengths.append(proposal.numel())
        matched = proposal.numel() if matched_all else 0
        # the model keeps the matched drafts and adds its own next token, as AssistedDecoding does
        sequence = torch.cat((sequence, proposal[None, :matched], torch.tensor([[3]])), dim=1)
        drafts.accepted(sequence, matched, proposal.numel())
    lengths.append(drafts.propose(sequence, 10, _unchanged).numel())
    assert lengths == [2, 1, 1, 1, 3]


def test_a_one_token_assistant_draft_is_accepted() -> None:
    drafts = AssistantDrafts(_ConstantAssistant([0.0, 1.0, NEG, NEG]), 1, None, "constant", [], {})
    assert drafts.propose(torch.tensor([[1, 2]]), 10, _unchanged).tolist() == [1]


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ([7, 5, 5], [5]),  # the latest earlier occurrence may end right before the last token
        ([9, 5, 6, 5], [6, 5]),  # at any offset
        ([1, 2, 3, 4], []),  # no earlier occurrence: nothing to propose
    ],
)
def test_prompt_lookup_proposes_what_followed_the_last_token_earlier(row: list[int], expected: list[int]) -> None:
    lookup = PromptLookup(3, 1, [])  # one-token n-grams are allowed
    assert lookup.propose(torch.tensor([row]), 10, _unchanged).tolist() == expected


def test_prompt_lookup_passes_the_models_own_inputs_to_every_forward() -> None:
    model = _marked_tiny()
    model.generate(torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]]), prompt_lookup_num_tokens=2, max_new_tokens=4, marker="m")
    assert model.markers and set(model.markers) == {"m"}


def test_prompt_lookup_reruns_the_sequence_once_where_the_cache_goes_stale() -> None:
    model = _marked_tiny()
    prompt = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]])
    scored = {"return_dict_in_generate": True, "output_scores": True}
    greedy = model.generate(prompt, max_new_tokens=8, do_sample=False, **scored)
    model.stale_at, model.chunks = 12, []
    out = model.generate(prompt, prompt_lookup_num_tokens=3, max_new_tokens=8, **scored)
    # drafts are verified several at a time: other shapes, so the same tokens up to a near tie
    assert_similar_generation(out.sequences, greedy.sequences, greedy.scores, prompt_length=prompt.shape[1])
    # no chunk fed on top of the cache reaches past the stale length; reaching it reruns everything, once
    assert all(past + length < 12 for past, length in model.chunks if 0 < past < 12), model.chunks
    reruns = [length for past, length in model.chunks[1:] if past == 0]
    assert len(reruns) == 1 and reruns[0] >= 12, model.chunks


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"use_cache": False}, "need the KV cache; drop use_cache=False"),
        ({"past_key_values": True}, "start from the prompt; drop past_key_values"),
    ],
)
def test_prompt_lookup_refuses_what_it_cannot_honour(
    model: Any, prompts: dict[str, dict[str, torch.Tensor]], kwargs: dict[str, Any], message: str
) -> None:
    if "past_key_values" in kwargs:
        with torch.no_grad():
            kwargs = {"past_key_values": model(**prompts["single"], use_cache=True).past_key_values}
    with pytest.raises(GenerationError, match=message):
        model.generate(**prompts["single"], prompt_lookup_num_tokens=2, max_new_tokens=3, **kwargs)

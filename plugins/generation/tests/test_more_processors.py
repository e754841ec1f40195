"""The remaining processors and warpers: scores equal to the reference's, and applied from the config."""

from __future__ import annotations

import pytest
import torch
from generation_similarity import assert_same_generation
from transformers.generation import logits_process as reference

import microformers_generation as ours
from microformers import GenerationError, set_seed
from microformers_sdk.testing import assert_close

VOCAB = 50


@pytest.fixture
def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(0, 12, (4, 9), generator=generator)
    input_ids[0] = torch.tensor([3, 4, 5, 8, 3, 4, 6, 3, 4])
    scores = torch.randn(4, VOCAB, generator=generator) * 3
    scores[1, 7] = float("nan")
    scores[2, 9] = float("inf")
    scores[3, :20] = float("-inf")
    return input_ids, scores


PROMPT = torch.tensor([[3, 4, 6, 9, 3], [1, 1, 2, 4, 8]])
BIAS = [[[4], -3.0], [[3, 4, 7], 5.0], [[4, 11], 2.5], [[6, 3, 4], -1.5]]


def allowed(batch_id: int, ids: torch.Tensor) -> list[int]:
    return [int(ids[-1]) + 1, 7 + batch_id, 30]


CASES = {
    "sequence_bias": (lambda m: m.SequenceBiasLogitsProcessor(BIAS), {}),
    "prefix_constrained": (lambda m: m.PrefixConstrainedLogitsProcessor(allowed, 2), {}),
    "suppress_at_begin": (lambda m: m.SuppressTokensAtBeginLogitsProcessor([1, 5, 9], 9), {}),
    "suppress_at_begin_later": (lambda m: m.SuppressTokensAtBeginLogitsProcessor([1, 5, 9], 4), {}),
    "forced_bos_first": (lambda m: m.ForcedBOSTokenLogitsProcessor(6), {"length": 1}),
    "forced_bos_later": (lambda m: m.ForcedBOSTokenLogitsProcessor(6), {}),
    "forced_eos": (lambda m: m.ForcedEOSTokenLogitsProcessor(10, [2, 5]), {}),
    "exponential_decay": (lambda m: m.ExponentialDecayLengthPenalty((2, 1.5), [2, 21], 3), {}),
    "inf_nan": (lambda m: m.InfNanRemoveLogitsProcessor(), {}),
    "epsilon": (lambda m: m.EpsilonLogitsWarper(0.05), {}),
    "epsilon_keep": (lambda m: m.EpsilonLogitsWarper(0.3, min_tokens_to_keep=3), {}),
    "eta": (lambda m: m.EtaLogitsWarper(0.05), {}),
    "eta_keep": (lambda m: m.EtaLogitsWarper(0.5, min_tokens_to_keep=4), {}),
    "encoder_repetition": (lambda m: m.EncoderRepetitionPenaltyLogitsProcessor(1.7, PROMPT), {}),
    "encoder_no_repeat_2": (lambda m: m.EncoderNoRepeatNGramLogitsProcessor(2, PROMPT), {}),
    "encoder_no_repeat_1": (lambda m: m.EncoderNoRepeatNGramLogitsProcessor(1, PROMPT), {}),
    "encoder_repetition_below_one": (lambda m: m.EncoderRepetitionPenaltyLogitsProcessor(0.5, PROMPT), {}),
    "encoder_no_repeat_3": (lambda m: m.EncoderNoRepeatNGramLogitsProcessor(3, PROMPT), {"last": [3, 4]}),
    "encoder_no_repeat_one_ngram_long": (
        lambda m: m.EncoderNoRepeatNGramLogitsProcessor(3, PROMPT[:, 1:4]),
        {"last": [4, 6]},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_processor_matches_reference(inputs, case):
    make, options = CASES[case]
    input_ids, scores = inputs
    if "length" in options:
        input_ids = input_ids[:, : options["length"]]
    if "last" in options:  # the rows end as a prompt n-gram begins, so something is banned
        input_ids = input_ids.clone()
        input_ids[:, -len(options["last"]) :] = torch.tensor(options["last"])
    if case != "inf_nan":
        scores = torch.nan_to_num(scores, nan=0.0, posinf=30.0)
    mine = make(ours)(input_ids, scores.clone())
    theirs = make(reference)(input_ids, scores.clone())
    torch.testing.assert_close(mine, theirs, equal_nan=True)
    if case == "inf_nan":
        assert torch.isfinite(mine).all()
    elif not case.endswith("_later"):
        assert not torch.equal(mine, scores), "the processor changed nothing"


def test_guidance_matches_reference(model, reference_model, prompts):
    kwargs = {"max_new_tokens": 4, "guidance_scale": 1.5, "return_dict_in_generate": True, "output_scores": True}
    expected = reference_model.generate(**prompts["single"], **kwargs)
    mine = model.generate(**prompts["single"], **kwargs)
    # two libraries' kernels: the same tokens up to a near tie, the same scores while they agree
    assert_same_generation(mine, expected, prompt_length=8, rtol=1e-4, atol=1e-4)
    negative = {"negative_prompt_ids": prompts["single"]["input_ids"][:, :3]}
    expected = reference_model.generate(**prompts["single"], **kwargs, **negative)
    mine = model.generate(**prompts["single"], **kwargs, **negative)
    assert_same_generation(mine, expected, prompt_length=8, rtol=1e-4, atol=1e-4)


SETTINGS = [
    {
        "sequence_bias": [[[10], 4.0], [[7, 8], 3.0]],
        "suppress_tokens": [5, 6],
        "begin_suppress_tokens": [7, 8, 9],
        "forced_bos_token_id": 4,
        "forced_eos_token_id": [2, 3],
    },
    {
        "exponential_decay_length_penalty": (2, 1.3),
        "eos_token_id": [5, 9],
        "remove_invalid_values": True,
        "encoder_repetition_penalty": 1.5,
    },
    {"encoder_no_repeat_ngram_size": 2, "num_beams": 2},
    {"do_sample": True, "epsilon_cutoff": 0.02, "eta_cutoff": 0.05, "top_k": 0, "num_beams": 2},
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "+".join(s))
def test_settings_apply_the_processors_as_the_reference(model, reference_model, prompts, settings):
    kwargs = {**settings, "max_new_tokens": 5, "return_dict_in_generate": True, "output_scores": True}
    one_token = {"input_ids": prompts["single"]["input_ids"][:, :1]}  # where forced bos / begin suppression act
    starts = "forced_bos_token_id" in settings or "begin_suppress_tokens" in settings
    for inputs in (prompts["batch"], one_token) if starts else (prompts["batch"],):
        set_seed(9)
        expected = reference_model.generate(**inputs, **kwargs)
        set_seed(9)
        mine = model.generate(**inputs, **kwargs)
        # two libraries' kernels: the same tokens up to a near tie, the same scores while they agree
        beams = "num_beams" in settings
        length = inputs["input_ids"].shape[1]
        if assert_same_generation(
            mine, expected, prompt_length=length, pad_token_id=0, beams=beams, rtol=1e-4, atol=1e-4
        ):
            for a, b in zip(mine.scores, expected.scores, strict=True):
                assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_prefix_allowed_tokens_fn_matches_reference(model, reference_model, prompts):
    kwargs = {"max_new_tokens": 4, "prefix_allowed_tokens_fn": allowed, "num_beams": 2}
    kwargs.update(return_dict_in_generate=True, output_scores=True)
    mine, expected = (
        model.generate(**prompts["batch"], **kwargs),
        reference_model.generate(**prompts["batch"], **kwargs),
    )
    # two libraries' kernels: the same beams up to a near tie
    assert_same_generation(mine, expected, prompt_length=8, pad_token_id=0, beams=True)


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: ours.SequenceBiasLogitsProcessor([[[1], 2]]), "sequence_bias"),
        (lambda: ours.SequenceBiasLogitsProcessor([]), "sequence_bias"),
        (lambda: ours.EpsilonLogitsWarper(1.5), "epsilon_cutoff"),
        (lambda: ours.EtaLogitsWarper(0.0), "eta_cutoff"),
        (lambda: ours.ExponentialDecayLengthPenalty(1.05, 2, 3), "exponential_decay_length_penalty"),
        (lambda: ours.EncoderRepetitionPenaltyLogitsProcessor(0.0, PROMPT), "encoder_repetition_penalty"),
        (lambda: ours.ForcedBOSTokenLogitsProcessor(-1), "forced_bos_token_id"),
        (lambda: ours.MinLengthLogitsProcessor(-1, 2), "min_length"),
        (lambda: ours.MinLengthLogitsProcessor(2, "x"), "eos_token_id"),
    ],
)
def test_bad_arguments_are_clear_errors(make, named):
    with pytest.raises(GenerationError, match=named):
        make()


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"seeding_scheme": "selfhash", "greenlist_ratio": 0.4},
        {"context_width": 3, "bias": 1.5, "hashing_key": 7},
        {"seeding_scheme": "selfhash", "context_width": 2},
    ],
)
def test_watermark_matches_reference(inputs, options):
    input_ids, scores = inputs
    scores = torch.nan_to_num(scores, nan=0.0, posinf=30.0)
    mine = ours.WatermarkLogitsProcessor(VOCAB, "cpu", **options)(input_ids, scores.clone())
    theirs = reference.WatermarkLogitsProcessor(VOCAB, "cpu", **options)(input_ids, scores.clone())
    torch.testing.assert_close(mine, theirs)
    assert not torch.equal(mine, scores)


def test_watermarking_config_applies_as_the_reference(model, reference_model, prompts):
    import transformers

    settings = {"seeding_scheme": "selfhash", "bias": 3.0}
    kwargs = {"do_sample": True, "max_new_tokens": 4, "return_dict_in_generate": True, "output_scores": True}
    set_seed(2)
    expected = reference_model.generate(
        **prompts["batch"], watermarking_config=transformers.WatermarkingConfig(**settings), **kwargs
    )
    set_seed(2)
    mine = model.generate(**prompts["batch"], watermarking_config=settings, **kwargs)
    # two libraries' kernels: the same draws up to a near tie, the same scores while they agree
    assert_same_generation(mine, expected, prompt_length=8, pad_token_id=0, rtol=1e-4, atol=1e-4)
    with pytest.raises(GenerationError, match="seeding_scheme"):
        model.generate(**prompts["single"], watermarking_config={"seeding_scheme": "nohash"}, max_new_tokens=2)

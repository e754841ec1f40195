"""The remaining processors and warpers: scores equal to the reference's, and applied from the config."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from generation_similarity import assert_same_generation
from transformers.generation import logits_process as reference

import microformers_generation as ours
from microformers import GenerationError, set_seed
from microformers_generation import (
    LogitNormalization,
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    UnbatchedClassifierFreeGuidanceLogitsProcessor,
)
from microformers_generation.defaults import merge_with_defaults
from microformers_generation.logits_process import watermark_processor
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


@pytest.mark.parametrize("settings", [{"repetition_penalty": 1.3}, {"min_new_tokens": 3}], ids=lambda s: next(iter(s)))
def test_settings_act_as_in_the_reference(
    model: Any, reference_model: Any, prompts: dict[str, Any], settings: dict[str, Any]
) -> None:
    # the end token is each row's first greedy choice, so min_new_tokens has something to forbid
    eos = int(reference_model.generate(**prompts["batch"], max_new_tokens=1, do_sample=False)[0, -1])
    kwargs = {**settings, "eos_token_id": eos, "max_new_tokens": 5, "return_dict_in_generate": True}
    kwargs["output_scores"] = True
    expected = reference_model.generate(**prompts["batch"], **kwargs)
    mine = model.generate(**prompts["batch"], **kwargs)
    # two libraries' kernels: the same tokens up to a near tie, the same scores while they agree
    assert_same_generation(mine, expected, prompt_length=8, pad_token_id=0, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "settings",
    [
        {"top_p": 0.6},
        {"min_p": 0.3},
        {"min_p": 0.9, "num_beams": 2},
        {"min_p": 0.9, "num_beams": 2, "eos_token_id": None},
    ],
    ids=lambda s: "+".join(f"{k}={v}" for k, v in s.items()),
)
def test_sampling_warpers_act_as_in_the_reference(
    model: Any, reference_model: Any, prompts: dict[str, Any], settings: dict[str, Any]
) -> None:
    import transformers  # the test oracle only

    kwargs = {"do_sample": True, "max_new_tokens": 3, "return_dict_in_generate": True, "output_scores": True}
    kwargs.update(settings)
    transformers.set_seed(9)
    expected = reference_model.generate(**prompts["batch"], **kwargs)
    transformers.set_seed(9)
    mine = model.generate(**prompts["batch"], **kwargs)
    # two libraries' kernels: the same draws up to a near tie of the warped scores, the same scores while they agree
    beams = "num_beams" in settings
    if assert_same_generation(mine, expected, prompt_length=8, pad_token_id=0, beams=beams, rtol=1e-4, atol=1e-4):
        for a, b in zip(mine.scores, expected.scores, strict=True):
            assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_sampling_with_top_k_one_is_greedy(model: Any, prompts: dict[str, Any]) -> None:
    greedy = model.generate(**prompts["batch"], max_new_tokens=4, do_sample=False)
    torch.manual_seed(5)
    # exact: the same forward path and shapes; top_k=1 leaves the argmax alone to be drawn
    assert torch.equal(model.generate(**prompts["batch"], max_new_tokens=4, do_sample=True, top_k=1), greedy)


def test_a_passed_processor_replaces_the_default_of_its_type_with_a_warning() -> None:
    default_min, other, passed_min = (
        MinLengthLogitsProcessor(5, 2),
        LogitNormalization(),
        MinLengthLogitsProcessor(0, 2),
    )
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("microformers")
    logger.addHandler(handler)
    try:
        merged = merge_with_defaults([default_min, other], [passed_min], LogitsProcessorList)
    finally:
        logger.removeHandler(handler)
    assert isinstance(merged, LogitsProcessorList)
    assert [id(p) for p in merged] == [id(passed_min), id(other)]
    assert [r.getMessage() for r in records] == [
        "generate() was given a MinLengthLogitsProcessor although its settings already create one; "
        "the one passed in is used"
    ]


def test_watermarking_config_as_an_object_sets_the_processor_as_the_same_dict() -> None:
    ids, scores = torch.tensor([[4, 9, 11]]), torch.zeros(1, 96)
    settings = {"bias": 5.0, "greenlist_ratio": 0.5}
    from_dict = watermark_processor(settings, 96, torch.device("cpu"))(ids, scores.clone())
    from_object = watermark_processor(SimpleNamespace(**settings), 96, torch.device("cpu"))(ids, scores.clone())
    assert torch.equal(from_object, from_dict)  # exact: the same processor on the same inputs
    assert set(from_object.unique().tolist()) == {0.0, 5.0} and int((from_object == 5.0).sum()) == 48


def test_watermarking_config_with_an_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(GenerationError, match=r"unknown keys \['colour'\]; known: \['greenlist_ratio', 'bias'"):
        watermark_processor({"bias": 1.0, "colour": 2}, 96, torch.device("cpu"))


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("negative", [False, True])
def test_guidance_processor_matches_the_reference_step_by_step(
    model: Any, reference_model: Any, use_cache: bool, negative: bool
) -> None:
    import transformers  # the test oracle only

    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 96, (1, 6), generator=generator)
    unconditional = ids[:, :3] if negative else None
    mine = UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, model, unconditional, use_cache=use_cache)
    reference = transformers.UnbatchedClassifierFreeGuidanceLogitsProcessor(
        1.5, reference_model, unconditional, use_cache=use_cache
    )
    for _ in range(3):
        scores = torch.randn(1, 96, generator=generator)
        with torch.no_grad():
            expected = reference(ids, scores.clone())
            out = mine(ids, scores.clone())
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        ids = torch.cat((ids, torch.randint(3, 96, (1, 1), generator=generator)), dim=1)

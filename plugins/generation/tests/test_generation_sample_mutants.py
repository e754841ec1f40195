"""Behaviour of the generation plugin that the seventh mutation pass's sample found unasserted (docs/reliability.md)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from generation_similarity import assert_same_generation
from generation_stand_ins import TinyCache, TinyConfig, TinyForCausalLM

from microformers import GenerationConfig, GenerationError
from microformers_generation.assisted import AssistantDrafts, PromptLookup
from microformers_generation.base import LogitsProcessorList
from microformers_generation.custom import resolve_custom_generate
from microformers_generation.decoding import IncrementalDecoder
from microformers_generation.defaults import merge_with_defaults
from microformers_generation.logits_process import (
    EncoderNoRepeatNGramLogitsProcessor,
    LogitNormalization,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TopKLogitsWarper,
    TypicalLogitsWarper,
    UnbatchedClassifierFreeGuidanceLogitsProcessor,
    watermark_processor,
)
from microformers_generation.outputs import compute_transition_scores
from microformers_generation.stopping_criteria import MaxTimeCriteria
from microformers_generation.strategies import TokenByToken
from microformers_generation.streamers import TextIteratorStreamer, TextStreamer
from microformers_sdk.testing import assert_close, assert_similar_generation

NEG = float("-inf")


# -- IncrementalDecoder: a model whose cache goes stale gets the whole sequence with every position id ------------
class _Cache:
    def __init__(self, length: int) -> None:
        self.length = length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length


class _StaleCacheModel:
    """Records each forward; says its cache must be rebuilt when the sequence reaches ``recompute_at`` tokens."""

    def __init__(self, recompute_at: int) -> None:
        self.recompute_at = recompute_at
        self.calls: list[dict[str, Any]] = []

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: _Cache | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
    ) -> SimpleNamespace:
        self.calls.append({"input_ids": input_ids.clone(), "position_ids": position_ids.clone()})
        past = 0 if past_key_values is None else past_key_values.length
        batch, length = input_ids.shape
        return SimpleNamespace(logits=torch.zeros(batch, length, 4), past_key_values=_Cache(past + length))

    __call__ = forward

    def cache_needs_recompute(self, past_length: int, total_length: int) -> bool:
        return total_length == self.recompute_at


@pytest.mark.parametrize("padded", [True, False])
def test_recomputing_a_stale_cache_feeds_every_token_with_the_prefill_positions(padded: bool) -> None:
    model = _StaleCacheModel(recompute_at=5)
    kwargs: dict[str, Any] = {"use_cache": True}
    if padded:
        kwargs["attention_mask"] = torch.tensor([[0, 1, 1], [1, 1, 1]])
    decoder = IncrementalDecoder(model, kwargs, max_length=10)
    ids = torch.tensor([[0, 7, 8], [5, 6, 7]])
    decoder.prefill(ids)
    for token in (3, 4):
        ids = torch.cat((ids, torch.full((2, 1), token)), dim=1)
        decoder.step(ids)
    last = model.calls[-1]
    assert torch.equal(last["input_ids"], ids)  # the whole sequence, into a fresh cache
    expected = [[1, 0, 1, 2, 3], [0, 1, 2, 3, 4]] if padded else [[0, 1, 2, 3, 4]] * 2
    assert last["position_ids"].tolist() == expected
    assert model.calls[-2]["input_ids"].shape == (2, 1)  # the step before only fed its newest token


class _KeepingModel(_StaleCacheModel):
    """A model whose forward takes ``logits_to_keep`` and ``output_hidden_states`` (and nothing else)."""

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: _Cache | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,
        output_hidden_states: bool | None = None,
    ) -> SimpleNamespace:
        out = super().forward(input_ids, attention_mask, position_ids, past_key_values, use_cache, return_dict)
        self.calls[-1].update(logits_to_keep=logits_to_keep, mask=attention_mask)
        out.hidden_states = (torch.ones(1),) if output_hidden_states else None
        return out

    __call__ = forward


def test_decoder_asks_for_the_last_logits_only_and_keeps_outputs_only_when_asked() -> None:
    model = _KeepingModel(recompute_at=0)
    plain = IncrementalDecoder(model, {}, max_length=10)
    plain.prefill(torch.tensor([[4, 5]]))
    assert model.calls[-1]["logits_to_keep"] == 1 and plain.last_outputs is None
    with_states = IncrementalDecoder(model, {}, max_length=10, output_hidden_states=True)
    with_states.prefill(torch.tensor([[4, 5]]))
    assert with_states.last_outputs.hidden_states is not None


def test_decoder_feeds_only_the_tokens_a_given_cache_lacks() -> None:
    model = _StaleCacheModel(recompute_at=0)
    decoder = IncrementalDecoder(model, {"past_key_values": _Cache(3)}, max_length=10)
    decoder.prefill(torch.tensor([[4, 5, 6, 7, 8]]))
    assert model.calls[-1]["input_ids"].tolist() == [[7, 8]]
    assert model.calls[-1]["position_ids"].tolist() == [[3, 4]]


def test_decoder_mask_grows_past_its_first_chunk_with_ones() -> None:
    model = _KeepingModel(recompute_at=0)
    decoder = IncrementalDecoder(model, {"attention_mask": torch.tensor([[0, 1]]), "use_cache": True}, max_length=400)
    ids = torch.tensor([[0, 4]])
    decoder.prefill(ids)
    for _ in range(300):
        ids = torch.cat((ids, torch.tensor([[5]])), dim=1)
        decoder.step(ids)
    mask = model.calls[-1]["mask"]
    assert mask.shape == (1, 302) and mask[0, 0] == 0 and bool(mask[0, 1:].all())


def test_processor_list_hands_each_processor_the_ids_with_extra_keywords() -> None:
    seen: list[torch.Tensor] = []

    def processor(input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        seen.append(input_ids)
        return scores + kwargs["shift"]

    ids = torch.tensor([[1, 2]])
    out = LogitsProcessorList([processor, processor])(ids, torch.zeros(1, 3), shift=1.0)
    # exact: 0 + 1 + 1 in floating point
    assert torch.equal(out, torch.full((1, 3), 2.0)) and all(x is ids for x in seen) and len(seen) == 2


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


def test_suppress_tokens_takes_a_list_of_ids() -> None:
    out = SuppressTokensLogitsProcessor([1, 3])(torch.tensor([[0]]), torch.zeros(1, 5))
    assert torch.isinf(out).nonzero()[:, 1].tolist() == [1, 3]


# -- settings turned into processors -------------------------------------------------------------------------
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


# -- lengths and caches chosen by generate -------------------------------------------------------------------------
def _warnings_of(run: Any) -> tuple[Any, list[str]]:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("microformers")
    logger.addHandler(handler)
    try:
        result = run()
    finally:
        logger.removeHandler(handler)
    return result, [r.getMessage() for r in records if r.levelno >= logging.WARNING]


def test_lengths_up_to_the_context_need_no_warning() -> None:
    model = _marked_tiny()  # max_position_embeddings=64, default max_length 20
    prompt = torch.full((1, 50), 5)
    out, warnings = _warnings_of(lambda: model.generate(prompt))  # 50 + 20 is clamped to the context quietly
    assert out.shape[1] == 64 and warnings == []
    out, warnings = _warnings_of(lambda: model.generate(prompt, max_new_tokens=14))  # exactly the context
    assert out.shape[1] == 64 and warnings == []
    out, warnings = _warnings_of(lambda: model.generate(prompt, max_new_tokens=15))
    assert out.shape[1] == 64 and len(warnings) == 1 and "max_position_embeddings=64" in warnings[0]


def test_static_cache_is_sized_for_max_length_and_compile_config_true_compiles_with_defaults(
    model: Any, prompts: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[Any] = []
    make = model.make_static_cache
    monkeypatch.setattr(model, "make_static_cache", lambda length: sizes.append(length) or make(length))
    scored = {"return_dict_in_generate": True, "output_scores": True}
    expected = model.generate(**prompts["single"], max_new_tokens=3, **scored)
    static = model.generate(**prompts["single"], max_new_tokens=3, cache_implementation="static", **scored)
    # a static cache attends over its whole (masked) length: other shapes, so the same tokens up to a near tie
    assert_same_generation(static, expected, prompt_length=8)
    assert sizes == [prompts["single"]["input_ids"].shape[1] + 3]
    compiled: list[dict[str, Any]] = []
    monkeypatch.setattr(model, "compile_decode_step", lambda **kwargs: compiled.append(kwargs))
    model.generate(**prompts["single"], max_new_tokens=2, compile_config=True)
    assert compiled == [{}]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"colour": 1}, r"neither generation settings nor inputs of _MarkedTiny\.forward: \['colour'\]"),
        (
            {"num_beams": 2, "streamer": SimpleNamespace(put=print, end=print)},
            r"^streamer= works with one sequence per step",
        ),
        ({"synced_gpus": True}, r"^generate\(\): synced_gpus= is not supported here"),
        ({"assistant_tokenizer": object()}, r"^generate\(\): assistant_tokenizer= is not supported here"),
        ({"input_ids": torch.tensor([[5]])}, r"^generate\(\) got both inputs and input_ids"),
        ({"inputs": torch.zeros(1, 0, dtype=torch.long)}, r"^input_ids is empty; pass at least one token"),
    ],
)
def test_generate_refusals_say_what_to_change(kwargs: dict[str, Any], message: str) -> None:
    kwargs = {"inputs": torch.tensor([[5, 6]]), **kwargs}
    with pytest.raises(GenerationError, match=message):
        _marked_tiny().generate(max_new_tokens=2, **kwargs)


def test_a_batch_without_pad_or_end_token_is_refused_naming_both() -> None:
    torch.manual_seed(0)
    model = _MarkedTiny(TinyConfig()).eval()
    with pytest.raises(
        GenerationError,
        match=r"rows that finish early\), but neither pad_token_id nor eos_token_id is set; pass pad_token_id=\.\.\. or set model",
    ):
        model.generate(torch.tensor([[5, 6], [7, 8]]), max_new_tokens=2)


def test_input_ids_are_checked_against_the_embedding_table(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model.config, "vocab_size", 200)  # a config that disagrees with the 96 embeddings
    with pytest.raises(GenerationError, match="from 5 to 100, outside the model's vocabulary of 96 ids"):
        model.generate(torch.tensor([[5, 100]]), max_new_tokens=2)


def test_a_strategy_builds_its_own_processors() -> None:
    class ForceSeven(TokenByToken):
        def build_logits_processor(self, model: Any, config: GenerationConfig, **kwargs: Any) -> LogitsProcessorList:
            processors = super().build_logits_processor(model, config, **kwargs)
            processors.append(lambda ids, scores: torch.where(torch.arange(scores.shape[-1]) == 7, 0.0, NEG))
            return processors

    model = _marked_tiny()
    out = ForceSeven("force-seven", sample=False)(
        model, torch.tensor([[5, 6]]), generation_config=GenerationConfig(max_new_tokens=3), model_kwargs={}
    )
    assert out.tolist() == [[5, 6, 7, 7, 7]]


# -- GenerationConfig.validate (this plugin's implementation) -----------------------------------------------------
@pytest.mark.parametrize("settings", [{"stop_strings": ["ab", "c"]}, {"cache_implementation": "dynamic"}])
def test_valid_settings_pass_validation(settings: dict[str, Any]) -> None:
    GenerationConfig(**settings).validate()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"temperature": -1.0}, r"^temperature=-1\.0 must be a positive number\.$"),
        ({"min_length": -1}, r"^min_length=-1 must be an integer >= 0$"),
    ],
)
def test_invalid_settings_are_named_by_validation(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(GenerationError, match=message):
        GenerationConfig(**settings).validate()


# -- beam search -------------------------------------------------------------------------------------------------
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


# -- logits processors ------------------------------------------------------------------------------------------
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


def test_transition_scores_are_the_raw_scores_unless_normalised() -> None:
    scores = (torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0.5, 0.0, -1.0]]))
    sequences = torch.tensor([[7, 2, 0]])
    assert compute_transition_scores(None, sequences, scores).tolist() == [[3.0, 0.5]]  # exact: picked, not computed
    normalised = compute_transition_scores(None, sequences, scores, normalize_logits=True)
    torch.testing.assert_close(normalised, torch.stack([s.log_softmax(-1)[0, t] for s, t in zip(scores, (2, 0))])[None])


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


# -- stopping criteria -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_time", [0, -1.5, float("nan")])
def test_max_time_must_be_a_positive_number_of_seconds(max_time: float) -> None:
    with pytest.raises(GenerationError, match=r"max_time=.* must be a positive number of seconds"):
        MaxTimeCriteria(max_time)


# -- assisted decoding: the assistant's drafts --------------------------------------------------------------------
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


class _CroppableTinyCache(TinyCache):
    def crop(self, length: int) -> None:
        self.states = self.states[:, :length]


class _MarkedTiny(TinyForCausalLM):
    """The tiny stand-in LM with one more forward input, recorded at each call, and a cache that crops.

    ``stale_at``: its cached states go stale once the sequence reaches that many tokens (as Phi-3's LongRoPE).
    """

    stale_at: int | None = None

    def cache_needs_recompute(self, past_length: int, total_length: int) -> bool:
        return self.stale_at is not None and past_length < self.stale_at <= total_length

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        marker: str | None = None,
        **kwargs: Any,
    ) -> Any:
        self.markers.append(marker)
        self.chunks.append((0 if past_key_values is None else past_key_values.get_seq_length(), input_ids.shape[1]))
        if use_cache and past_key_values is None:
            past_key_values = _CroppableTinyCache()
        return super().forward(
            input_ids, attention_mask, position_ids, past_key_values, use_cache, return_dict, **kwargs
        )


def _marked_tiny() -> _MarkedTiny:
    torch.manual_seed(0)
    model = _MarkedTiny(TinyConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)).eval()
    model.markers, model.chunks = [], []
    return model


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


# -- custom_generate from the Hub -----------------------------------------------------------------------------------
def test_hub_custom_generate_errors_name_the_repository(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import microformers.hub

    monkeypatch.setattr(microformers.hub, "resolve_folder", lambda name, patterns, **kwargs: str(tmp_path))
    with pytest.raises(GenerationError, match="custom_generate='someone/decoder': .* does not exist"):
        resolve_custom_generate("someone/decoder", True, {})


def test_hub_custom_generate_gets_the_hub_keywords_and_the_function_the_rest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import microformers.hub

    (tmp_path / "custom_generate").mkdir()
    (tmp_path / "custom_generate" / "generate.py").write_text(
        "def generate(model, **kwargs):\n    return sorted(kwargs)\n"
    )
    fetched: list[dict[str, Any]] = []

    def resolve_folder(name: str, patterns: list[str], **kwargs: Any) -> str:
        fetched.append(kwargs)
        return str(tmp_path)

    monkeypatch.setattr(microformers.hub, "resolve_folder", resolve_folder)
    names = _marked_tiny().generate(
        torch.tensor([[5, 6]]), custom_generate="someone/decoder", trust_remote_code=True, revision="v2"
    )
    assert fetched == [{"revision": "v2"}]
    assert "revision" not in names and "inputs" in names


# -- streamers ------------------------------------------------------------------------------------------------------
class _CharTokenizer:
    def __init__(self, alphabet: str) -> None:
        self.alphabet = alphabet

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return "".join(self.alphabet[i] for i in ids)


class _Collecting(TextStreamer):
    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.pieces: list[str] = []

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        self.pieces.append(text)


def test_text_after_an_ideograph_is_emitted_at_once() -> None:
    streamer = _Collecting(_CharTokenizer("ab\u6f22 "))
    streamer.put(torch.tensor([0, 1, 2]))  # "ab漢": no space needed before emitting ideographic text
    assert "".join(streamer.pieces) == "ab\u6f22"


@pytest.mark.parametrize("streamer_class", [TextStreamer, TextIteratorStreamer])
def test_streamers_refuse_a_batch_naming_themselves(streamer_class: type) -> None:
    streamer = streamer_class(_CharTokenizer("ab"))
    with pytest.raises(GenerationError, match=f"^{streamer_class.__name__} streams one sequence.*a batch of 2"):
        streamer.put(torch.zeros(2, 3, dtype=torch.long))

"""``text2text-generation``, ``summarization`` and ``translation`` on tiny random T5 and BART checkpoints.

The reference 5.x has no such pipelines any more; its 4.x behaviour is emulated with the reference model and
tokenizer: the task prefix and generation settings of ``task_specific_params``, ``generate`` on each input,
``decode(skip_special_tokens=True, clean_up_tokenization_spaces=False)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers import ConfigError
from microformers.cli import main
from microformers_sdk.testing import assert_similar_generation, one_thread  # noqa: F401  (autouse: one thread)

transformers = pytest.importorskip("transformers")

TINY_BART = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 37,
    "decoder_ffn_dim": 37,
    "max_position_embeddings": 64,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
}
TEXTS = ["the cat sat on the mat .", "hello world", "one two three four five six seven"]

_REFERENCE: dict[str, Any] = {}


def reference(folder: Path) -> tuple[Any, Any]:
    key = str(folder)
    if key not in _REFERENCE:
        _REFERENCE[key] = (
            transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval(),
            transformers.AutoTokenizer.from_pretrained(folder),
        )
    return _REFERENCE[key]


def reference_generate(folder: Path, text: str, prefix: str = "", **generate: Any) -> tuple[list[list[int]], Any]:
    """The reference 4.x pipeline's steps: tokenize ``prefix + text``, ``generate``; (token rows, scores)."""
    model, tokenizer = reference(folder)
    with torch.no_grad():
        out = model.generate(
            **tokenizer(prefix + text, return_tensors="pt"),
            output_scores=True,
            return_dict_in_generate=True,
            **generate,
        )
    return out.sequences.tolist(), out.scores


def reference_decode(folder: Path, ids: list[int], clean_up_tokenization_spaces: bool = False) -> str:
    return reference(folder)[1].decode(
        ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
    )


def assert_same_as_reference(ours_ids: list[list[int]], folder: Path, text: str, prefix: str = "", **generate: Any):
    """Our token rows equal the reference's (up to a near tie); returns the reference's rows."""
    theirs, scores = reference_generate(folder, text, prefix, **generate)
    beams = generate.get("num_beams", 1) > 1
    assert_similar_generation(ours_ids, theirs, None if beams else scores, prompt_length=1, msg=text)
    return theirs


def ids_of(records: list[dict[str, Any]], name: str) -> list[list[int]]:
    return [record[f"{name}_token_ids"].tolist() for record in records]


@pytest.fixture(params=["t5", "bart"])
def folder(request, make_seq2seq) -> Path:
    return make_seq2seq(request.param)


# -- text2text-generation ----------------------------------------------------------------------------
def test_text2text_greedy_tokens_and_text_match_the_reference(folder):
    pipe = microformers.pipeline("text2text-generation", model=str(folder))
    for text in TEXTS:
        ours = ids_of(pipe(text, return_tensors=True, max_new_tokens=8), "generated")
        theirs = assert_same_as_reference(ours, folder, text, max_new_tokens=8)
        if ours == theirs:
            assert pipe(text, max_new_tokens=8) == [{"generated_text": reference_decode(folder, theirs[0])}]


def test_a_list_gives_one_record_per_input_and_batching_changes_nothing(folder):
    pipe = microformers.pipeline("text2text-generation", model=str(folder))
    one_by_one = [pipe(text, max_new_tokens=6)[0] for text in TEXTS]
    listed = pipe(TEXTS, max_new_tokens=6)
    assert listed == one_by_one  # a flat list of records, as the reference 4.x
    batched = pipe(TEXTS, batch_size=2, max_new_tokens=6)
    assert [set(r) for r in batched] == [{"generated_text"}] * 3
    assert batched == one_by_one
    streamed = list(pipe(iter(TEXTS), batch_size=3, max_new_tokens=6))
    assert streamed == [[record] for record in one_by_one]


def test_num_return_sequences_gives_several_records_equal_to_reference_beams(folder):
    pipe = microformers.pipeline("text2text-generation", model=str(folder))
    settings = {"max_new_tokens": 6, "num_beams": 3, "num_return_sequences": 2}
    records = pipe(TEXTS[0], return_tensors=True, **settings)
    assert len(records) == 2 and all(set(r) == {"generated_token_ids"} for r in records)
    assert all(isinstance(r["generated_token_ids"], torch.Tensor) for r in records)
    assert_same_as_reference(ids_of(records, "generated"), folder, TEXTS[0], **settings)
    nested = pipe(TEXTS[:2], **settings)  # several records per input: one list per input
    assert [len(r) for r in nested] == [2, 2]
    assert all(set(record) == {"generated_text"} for result in nested for record in result)


def test_clean_up_tokenization_spaces_and_skip_special_tokens(make_seq2seq):
    folder = make_seq2seq("t5")
    pipe = microformers.pipeline("text2text-generation", model=str(folder))
    found_difference = False
    for text in TEXTS:
        ids = ids_of(pipe(text, return_tensors=True, max_new_tokens=10), "generated")[0]
        raw = pipe(text, max_new_tokens=10)[0]["generated_text"]
        cleaned = pipe(text, max_new_tokens=10, clean_up_tokenization_spaces=True)[0]["generated_text"]
        assert raw == reference_decode(folder, ids)  # the 4.x default: no clean-up
        assert cleaned == reference_decode(folder, ids, clean_up_tokenization_spaces=True)
        found_difference |= raw != cleaned
        with_specials = pipe(text, max_new_tokens=10, skip_special_tokens=False)[0]["generated_text"]
        assert with_specials.startswith("<pad>")  # T5's decoder starts from the pad token
    assert found_difference, "no output had a token that clean-up joins; change the texts or the seed"


def test_task_specific_prefix_reaches_the_model(make_seq2seq):
    folder = make_seq2seq("t5", prefix="red blue ")  # config.prefix: used by every task without its own
    pipe = microformers.pipeline("text2text-generation", model=str(folder))
    ours = ids_of(pipe(TEXTS[0], return_tensors=True, max_new_tokens=6), "generated")
    assert_same_as_reference(ours, folder, TEXTS[0], prefix="red blue ", max_new_tokens=6)
    ours = ids_of(pipe(TEXTS[0], return_tensors=True, max_new_tokens=6, prefix=""), "generated")
    assert_same_as_reference(ours, folder, TEXTS[0], max_new_tokens=6)


# -- summarization -----------------------------------------------------------------------------------
def test_summarization_uses_the_task_settings_of_the_config(make_seq2seq, caplog):
    folder = make_seq2seq("t5")  # task_specific_params["summarization"]: prefix, max_length 12, min_length 3, 2 beams
    pipe = microformers.pipeline("summarization", model=str(folder))
    records = pipe(TEXTS[0], return_tensors=True)
    settings = {"max_length": 12, "min_length": 3, "num_beams": 2}
    assert_same_as_reference(ids_of(records, "summary"), folder, TEXTS[0], prefix="good morning ", **settings)
    theirs, _ = reference_generate(folder, TEXTS[0], prefix="good morning ", **settings)
    assert pipe(TEXTS[0]) == [{"summary_text": reference_decode(folder, theirs[0])}]
    # the call's settings win over the config's
    records = pipe(TEXTS[0], return_tensors=True, num_beams=1, max_length=5)
    assert_same_as_reference(ids_of(records, "summary"), folder, TEXTS[0], "good morning ", min_length=3, max_length=5)
    with caplog.at_level("WARNING", logger="microformers.pipelines"):
        pipe("hello", max_length=12)
    assert "max_length is 12 but the input is only" in caplog.text


def test_summarization_on_bart_without_task_settings(make_seq2seq):
    folder = make_seq2seq("bart")
    pipe = microformers.pipeline("summarization", model=str(folder))
    for text in TEXTS[:2]:
        ours = ids_of(pipe(text, return_tensors=True, max_new_tokens=7), "summary")
        theirs = assert_same_as_reference(ours, folder, text, max_new_tokens=7)
        if ours == theirs:
            assert pipe(text, max_new_tokens=7) == [{"summary_text": reference_decode(folder, theirs[0])}]


# -- translation -------------------------------------------------------------------------------------
def test_translation_xx_to_yy_uses_the_pair_prefix_and_settings(make_seq2seq):
    folder = make_seq2seq("t5")  # translation_en_to_de: prefix "hello world ", max_length 10
    pipe = microformers.pipeline("translation_en_to_de", model=str(folder))
    assert pipe.task == "translation_en_to_de"
    ours = ids_of(pipe(TEXTS[0], return_tensors=True), "translation")
    theirs = assert_same_as_reference(ours, folder, TEXTS[0], "hello world ", max_length=10, early_stopping=True)
    assert pipe(TEXTS[0]) == [{"translation_text": reference_decode(folder, theirs[0])}]
    assert [set(r) for r in pipe(TEXTS, batch_size=2)] == [{"translation_text"}] * 3


def test_translation_with_src_lang_and_tgt_lang_finds_the_pair(make_seq2seq):
    folder = make_seq2seq("t5")
    by_name = microformers.pipeline("translation_en_to_fr", model=str(folder))
    by_args = microformers.pipeline("translation", model=str(folder), src_lang="en", tgt_lang="fr")
    ours = ids_of(by_args(TEXTS[1], return_tensors=True), "translation")
    assert_same_as_reference(ours, folder, TEXTS[1], "red blue ", max_length=9)
    assert by_args(TEXTS) == by_name(TEXTS)
    plain = microformers.pipeline("translation", model=str(folder))  # no pair: no prefix (as 4.x)
    ours = ids_of(plain(TEXTS[1], return_tensors=True, max_new_tokens=5), "translation")
    assert_same_as_reference(ours, folder, TEXTS[1], max_new_tokens=5)
    # call-time languages
    assert plain(TEXTS[1], src_lang="en", tgt_lang="fr") == by_name(TEXTS[1])


def test_translation_with_a_language_code_tokenizer_forces_the_target_code(make_seq2seq):
    """mBART-style tokenizers build the inputs themselves: ``src_lang`` set on the tokenizer and the
    ``tgt_lang`` code forced as the first generated token (``forced_bos_token_id``)."""
    folder = make_seq2seq("bart")
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    calls: list[tuple[str, str]] = []

    def build(text: str, return_tensors: str, src_lang: str, tgt_lang: str, **extra: Any) -> Any:
        calls.append((src_lang, tgt_lang))
        inputs = tokenizer(text, return_tensors=return_tensors, **extra)
        inputs["forced_bos_token_id"] = tokenizer.convert_tokens_to_ids(tgt_lang)
        return inputs

    tokenizer._build_translation_inputs = build
    pipe = microformers.pipeline(
        "translation", model=str(folder), tokenizer=tokenizer, src_lang="Welt", tgt_lang="Haus"
    )
    haus = tokenizer.convert_tokens_to_ids("Haus")
    batched = pipe(TEXTS, batch_size=2, return_tensors=True, max_new_tokens=5)
    for records in (pipe(TEXTS[0], return_tensors=True, max_new_tokens=5), *([record] for record in batched)):
        ids = ids_of(records, "translation")[0]
        assert ids[:2] == [2, haus]  # decoder_start_token_id, then the forced language code
    assert calls[0] == ("Welt", "Haus")
    ours = ids_of(pipe(TEXTS[0], return_tensors=True, max_new_tokens=5, tgt_lang="Katze"), "translation")
    assert ours[0][1] == tokenizer.convert_tokens_to_ids("Katze")
    assert_same_as_reference(
        ours, folder, TEXTS[0], max_new_tokens=5, forced_bos_token_id=tokenizer.convert_tokens_to_ids("Katze")
    )


@pytest.fixture(scope="module")
def mbart_folder(tmp_path_factory) -> Path:
    """A tiny random mBART with a real ``MBartTokenizer`` (a SentencePiece BPE model trained here)."""
    sentencepiece = pytest.importorskip("sentencepiece")
    pytest.importorskip("microformers_sentencepiece")
    pytest.importorskip("microformers_bart")
    folder = tmp_path_factory.mktemp("tiny-mbart")
    corpus = [
        "the cat sat on the mat",
        "hello world how are you",
        "good morning my friend",
        "Hallo Welt wie geht es",
        "guten Morgen mein Freund",
        "das Haus ist gross und rot",
    ]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus * 20),
        model_prefix=str(folder / "m"),
        model_type="bpe",
        vocab_size=100,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    (folder / "m.model").rename(folder / "sentencepiece.bpe.model")
    (folder / "m.vocab").unlink()
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "MBartTokenizer", "src_lang": "en_XX"})
    )
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model(
        "mbart", **{**TINY_BART, "vocab_size": len(tokenizer), "forced_eos_token_id": 2}
    )
    model = microformers.AutoModelForSeq2SeqLM.from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("src_lang", "tgt_lang"), [("en_XX", "de_DE"), ("de_DE", "en_XX")])
def test_translation_with_mbart_language_codes_matches_the_reference(mbart_folder, src_lang, tgt_lang):
    pipe = microformers.pipeline("translation", model=str(mbart_folder), src_lang=src_lang, tgt_lang=tgt_lang)
    ref_tokenizer = transformers.AutoTokenizer.from_pretrained(mbart_folder, src_lang=src_lang)
    ref_model = reference(mbart_folder)[0]
    forced = ref_tokenizer.convert_tokens_to_ids(tgt_lang)
    for text in ("the cat sat on the mat", "guten Morgen"):
        ours = ids_of(pipe(text, return_tensors=True, max_new_tokens=6), "translation")
        with torch.no_grad():
            out = ref_model.generate(
                **ref_tokenizer(text, return_tensors="pt"),
                max_new_tokens=6,
                forced_bos_token_id=forced,
                output_scores=True,
                return_dict_in_generate=True,
            )
        assert ours[0][1] == forced  # the target language code comes first
        assert_similar_generation(ours, out.sequences, out.scores, prompt_length=1, msg=text)
        if ours == out.sequences.tolist():
            expected = ref_tokenizer.decode(
                out.sequences[0], skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
            assert pipe(text, max_new_tokens=6) == [{"translation_text": expected}]
    with pytest.raises(ConfigError, match="xx_YY"):
        pipe("hello", tgt_lang="xx_YY")


# -- errors and the command line -----------------------------------------------------------------------
def test_a_decoder_only_or_encoder_model_is_a_clear_error(make_bert, tmp_path):
    folder = make_bert("AutoModelForMaskedLM")
    model = microformers.AutoModelForMaskedLM.from_pretrained(folder)
    for task in ("text2text-generation", "summarization", "translation"):
        with pytest.raises(ConfigError, match="encoder-decoder"):
            microformers.pipeline(task, model=model, tokenizer=str(folder))
    with pytest.raises(ConfigError, match="summarization"):
        microformers.pipeline("summarization", model=str(folder))


def test_bad_inputs_are_clear_errors(make_seq2seq):
    pipe = microformers.pipeline("text2text-generation", model=str(make_seq2seq("bart")))
    with pytest.raises(ConfigError, match="empty"):
        pipe("  ")
    with pytest.raises(ConfigError, match="string"):
        pipe(42)
    with pytest.raises(ConfigError, match="return_type"):
        pipe("hello", return_type="full")


def test_the_tasks_are_registered_with_the_seq2seq_head():
    for task in ("text2text-generation", "summarization", "translation"):
        reg = microformers.registry.get("pipelines", task)
        assert reg.plugin == "pipelines" and reg.meta["model_class"] == ("AutoModelForSeq2SeqLM",)


def test_any_translation_language_pair_is_a_task_name_that_keeps_the_pair():
    for task in ("translation_en_to_de", "translation_de_to_fr", "translation_en_XX_to_ro_RO"):
        name, reg = microformers.PIPELINE_REGISTRY.check_task(task)
        assert name == task and reg.name == "translation"
    with pytest.raises(microformers.MicroformersError, match="translation_en_de"):
        microformers.PIPELINE_REGISTRY.check_task("translation_en_de")


def test_a_translation_pair_in_the_task_name_sets_the_languages(make_seq2seq):
    pipe = microformers.pipeline("translation_fr_to_en", model=str(make_seq2seq("t5")))
    assert (pipe._preprocess_params["src_lang"], pipe._preprocess_params["tgt_lang"]) == ("fr", "en")


def test_run_translation_en_to_de_on_the_command_line(make_seq2seq, capsys):
    folder = str(make_seq2seq("t5"))
    expected = microformers.pipeline("translation_en_to_de", model=folder)(TEXTS[:2])
    assert main(["run", "--model", folder, "translation_en_to_de", *TEXTS[:2]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert lines == [[record] for record in expected]
    # a pair that is no registered task name runs the translation task with src_lang/tgt_lang
    assert main(["run", "translation_de_to_en", "Hallo Welt", "-m", folder, "-o", "max_new_tokens=4"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert set(json.loads(line)[0]) == {"translation_text"}
    assert main(["run", "summarization", "hello world", "-m", folder, "-o", "return_tensors=true"]) == 0
    assert isinstance(json.loads(capsys.readouterr().out)[0]["summary_token_ids"], list)

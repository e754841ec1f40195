"""AutoTokenizer dispatch, save_pretrained round trips, from_files, and the errors for bad folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spm_corpus import HELD_OUT

import microformers
from microformers.errors import ConfigError, FileMissingError
from microformers_sentencepiece import MBart50Tokenizer, MBartTokenizer, T5Tokenizer


def test_folders_without_a_tokenizer_class_are_dispatched_by_their_sentencepiece_file(
    t5_spm: Path, bpe_spm: Path, make_folder: Any
) -> None:
    assert type(microformers.AutoTokenizer.from_pretrained(make_folder(t5_spm, "spiece.model"))) is T5Tokenizer
    mbart = microformers.AutoTokenizer.from_pretrained(make_folder(bpe_spm, "sentencepiece.bpe.model"))
    assert type(mbart) is MBartTokenizer


def test_public_names_resolve_from_microformers() -> None:
    for name in ("T5Tokenizer", "T5TokenizerFast", "MBartTokenizer", "MBartTokenizerFast", "MBart50Tokenizer"):
        assert getattr(microformers, name).__name__ == name
    assert microformers.MBart50TokenizerFast.__name__ == "MBart50TokenizerFast"
    assert microformers.MarianTokenizer.__name__ == "MarianTokenizer"


@pytest.mark.parametrize(
    ("cls", "file_name", "kwargs"),
    [
        (T5Tokenizer, "spiece.model", {}),
        (MBartTokenizer, "sentencepiece.bpe.model", {"src_lang": "ro_RO", "tgt_lang": "en_XX"}),
        (MBart50Tokenizer, "sentencepiece.bpe.model", {"src_lang": "de_DE", "tgt_lang": "fr_XX"}),
    ],
)
def test_save_pretrained_round_trips_through_our_and_the_reference_loader(
    cls: Any,
    file_name: str,
    kwargs: dict[str, Any],
    t5_spm: Path,
    bpe_spm: Path,
    make_folder: Any,
    tmp_path: Path,
    transformers_module: Any,
) -> None:
    model = t5_spm if file_name == "spiece.model" else bpe_spm
    ours = cls.from_pretrained(make_folder(model, file_name), **kwargs)
    saved = tmp_path / "saved"
    ours.save_pretrained(saved)
    assert (saved / file_name).read_bytes() == model.read_bytes()
    assert json.loads((saved / "tokenizer_config.json").read_text())["tokenizer_class"] == cls.__name__
    again = microformers.AutoTokenizer.from_pretrained(saved)
    ref = transformers_module.AutoTokenizer.from_pretrained(saved)
    for loaded in (again, ref):
        assert dict(loaded(HELD_OUT, text_target=HELD_OUT, padding=True)) == dict(
            ours(HELD_OUT, text_target=HELD_OUT, padding=True)
        )
    (saved / "tokenizer.json").unlink()  # the SentencePiece file alone gives the same tokenizer
    alone = microformers.AutoTokenizer.from_pretrained(saved)
    assert dict(alone(HELD_OUT, padding=True)) == dict(ours(HELD_OUT, padding=True))


def test_from_files_builds_the_same_tokenizer(t5_spm: Path, make_folder: Any) -> None:
    folder = make_folder(t5_spm, "spiece.model")
    files = {"spiece.model": t5_spm.read_bytes(), "tokenizer_config.json": {"tokenizer_class": "T5Tokenizer"}}
    assert (
        T5Tokenizer.from_files(files)(HELD_OUT)["input_ids"]
        == T5Tokenizer.from_pretrained(folder)(HELD_OUT)["input_ids"]
    )


def test_missing_sentencepiece_file_names_the_file_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer"}))
    with pytest.raises(FileMissingError, match=r"spiece\.model is missing.*save the tokenizer again"):
        microformers.AutoTokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MBartTokenizer"}))
    with pytest.raises(FileMissingError, match=r"sentencepiece\.bpe\.model is missing"):
        microformers.AutoTokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
    with pytest.raises(FileMissingError, match=r"source\.spm is missing"):
        microformers.AutoTokenizer.from_pretrained(tmp_path)


def test_a_corrupt_sentencepiece_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "spiece.model").write_bytes(b"this is not a sentencepiece model")
    with pytest.raises(ConfigError, match=r"spiece\.model is not a valid SentencePiece model"):
        T5Tokenizer.from_pretrained(tmp_path)


def test_unknown_language_codes_are_refused_with_the_known_ones(bpe_spm: Path, make_folder: Any) -> None:
    folder = make_folder(bpe_spm, "sentencepiece.bpe.model")
    with pytest.raises(ConfigError, match=r"tgt_lang='xx_YY'.*en_XX"):
        MBartTokenizer.from_pretrained(folder, tgt_lang="xx_YY")
    tokenizer = MBart50Tokenizer.from_pretrained(folder)
    with pytest.raises(ConfigError, match=r"src_lang='english'.*ro_RO"):
        tokenizer.src_lang = "english"
    assert tokenizer.src_lang == "en_XX"


def test_as_target_tokenizer_names_the_modern_replacement(t5_spm: Path, bpe_spm: Path, make_folder: Any) -> None:
    for tokenizer in (
        T5Tokenizer.from_pretrained(make_folder(t5_spm, "spiece.model")),
        MBartTokenizer.from_pretrained(make_folder(bpe_spm, "sentencepiece.bpe.model")),
    ):
        with pytest.raises(ConfigError, match=r"text_target="):
            tokenizer.as_target_tokenizer()


def test_t5_extra_ids_disagreeing_with_the_listed_sentinels_is_an_error(t5_spm: Path, make_folder: Any) -> None:
    config = {"tokenizer_class": "T5Tokenizer", "extra_ids": 5, "additional_special_tokens": ["<extra_id_0>"]}
    with pytest.raises(ConfigError, match="extra_ids=5"):
        T5Tokenizer.from_pretrained(make_folder(t5_spm, "spiece.model", config))

"""Marian (``source.spm``, ``target.spm``, ``vocab.json``): parity with the reference, shared and separate vocabularies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from spm_corpus import HELD_OUT

import microformers
from microformers_sentencepiece import MarianTokenizer

TEXTS = [*HELD_OUT, ">>ro<< Salut </s> lume <unk>", "x <pad> y", ">>de<<Hallo"]


def marian_vocab(model: Path, codes: tuple[str, ...] = ()) -> dict[str, int]:
    """A vocab.json laid out like OPUS-MT's: ``</s>``, ``<unk>``, language codes, pieces, ``<pad>`` last."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    vocab = {"</s>": 0, "<unk>": 1, **{code: 2 + i for i, code in enumerate(codes)}}
    for index in range(processor.get_piece_size()):
        piece = processor.id_to_piece(index)
        if piece not in vocab and piece != "<s>":
            vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def make_marian(folder: Path, source: Path, target: Path, separate: bool) -> Path:
    folder.mkdir()
    shutil.copyfile(source, folder / "source.spm")
    shutil.copyfile(target, folder / "target.spm")
    (folder / "vocab.json").write_text(json.dumps(marian_vocab(source, (">>ro<<", ">>de<<"))), encoding="utf-8")
    if separate:
        (folder / "target_vocab.json").write_text(json.dumps(marian_vocab(target)), encoding="utf-8")
    config = {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": "en",
        "target_lang": "ro",
        "separate_vocabs": separate,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture(params=["shared", "separate"])
def marian_folder(request: pytest.FixtureRequest, tmp_path: Path, bpe_spm: Path, target_bpe_spm: Path) -> Path:
    separate = request.param == "separate"
    return make_marian(tmp_path / "marian", bpe_spm, target_bpe_spm, separate)


def test_marian_ids_labels_and_decoding_equal_the_reference(marian_folder: Path, transformers_module: Any) -> None:
    ref = transformers_module.MarianTokenizer.from_pretrained(marian_folder)
    ours = MarianTokenizer.from_pretrained(marian_folder)
    assert ours.get_vocab() == ref.get_vocab() and len(ours) == len(ref)
    assert ours.all_special_tokens == ref.all_special_tokens and ours.all_special_ids == ref.all_special_ids
    for text in TEXTS:
        expected, got = ref(text, text_target=text), ours(text, text_target=text)
        assert dict(got) == dict(expected), text
        assert ours.tokenize(text) == ref.tokenize(text)
        for skip in (False, True):
            # With separate vocabularies decode() reads target ids (the reference fails on source ids there).
            for ids in (got["labels"],) if ours.separate_vocabs else (got["input_ids"], got["labels"]):
                assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)
            if not ours.separate_vocabs:
                source = ours.decode(got["labels"], use_source_tokenizer=True, skip_special_tokens=skip)
                assert source == ref.decode(got["labels"], use_source_tokenizer=True, skip_special_tokens=skip)
    for options in (
        {"padding": True},
        {"padding": "max_length", "max_length": 20, "truncation": True},
        {"max_length": 10},
        {"padding": True, "pad_to_multiple_of": 8},
    ):
        assert dict(ours(TEXTS, text_target=TEXTS, **options)) == dict(ref(TEXTS, text_target=TEXTS, **options))
    assert dict(ours(text_target=TEXTS[:3], padding=True)) == dict(ref(text_target=TEXTS[:3], padding=True))
    batch = ours(text_target=TEXTS, padding=True)["input_ids"]
    assert ours.batch_decode(batch, skip_special_tokens=True) == ref.batch_decode(batch, skip_special_tokens=True)


def test_marian_appends_eos_and_pads_with_the_vocab_pad_id(marian_folder: Path) -> None:
    ours = MarianTokenizer.from_pretrained(marian_folder)
    encoded = ours(["a", "a longer sentence"], padding=True)
    assert encoded["input_ids"][1][-1] == ours.eos_token_id == 0
    assert encoded["input_ids"][0][-1] == ours.pad_token_id == ours.get_vocab()["<pad>"]
    assert encoded["attention_mask"][0][-1] == 0
    assert ours(">>ro<< Salut")["input_ids"][0] == ours.get_vocab()[">>ro<<"]


def test_auto_tokenizer_loads_marian_by_class_and_by_files(marian_folder: Path, transformers_module: Any) -> None:
    ours = microformers.AutoTokenizer.from_pretrained(marian_folder)
    assert type(ours).__name__ == "MarianTokenizer"
    ref = transformers_module.AutoTokenizer.from_pretrained(marian_folder)
    assert dict(ours(TEXTS, text_target=TEXTS, padding=True)) == dict(ref(TEXTS, text_target=TEXTS, padding=True))
    (marian_folder / "tokenizer_config.json").unlink()
    assert type(microformers.AutoTokenizer.from_pretrained(marian_folder)).__name__ == "MarianTokenizer"
    assert microformers.MarianTokenizer is MarianTokenizer


def test_marian_save_pretrained_round_trips(marian_folder: Path, tmp_path: Path, transformers_module: Any) -> None:
    ours = MarianTokenizer.from_pretrained(marian_folder)
    ours.save_pretrained(tmp_path / "saved")
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (tmp_path / "saved" / name).is_file()
    again = microformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    ref = transformers_module.MarianTokenizer.from_pretrained(tmp_path / "saved")
    expected = dict(ours(TEXTS, text_target=TEXTS, padding=True))
    assert dict(again(TEXTS, text_target=TEXTS, padding=True)) == expected
    assert dict(ref(TEXTS, text_target=TEXTS, padding=True)) == expected
    with pytest.raises(microformers.errors.ConfigError, match="text_target="):
        ours.as_target_tokenizer()

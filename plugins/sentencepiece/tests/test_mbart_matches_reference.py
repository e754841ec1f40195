"""mBART and mBART-50 (``sentencepiece.bpe.model``, fairseq ids, language codes): parity with the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spm_corpus import HELD_OUT
from spm_parity import assert_same_encodings, assert_same_vocabulary

import microformers_sentencepiece as spm_plugin

LANGS = [("en_XX", "ro_RO"), ("de_DE", None), ("fr_XX", "en_XX")]


@pytest.mark.parametrize("class_name", ["MBartTokenizer", "MBart50Tokenizer"])
@pytest.mark.parametrize(("src_lang", "tgt_lang"), LANGS)
def test_mbart_ids_labels_and_decoding_equal_the_reference(
    class_name: str, src_lang: str, tgt_lang: str | None, bpe_spm: Path, make_folder: Any, transformers_module: Any
) -> None:
    folder = make_folder(bpe_spm, "sentencepiece.bpe.model")
    kwargs = {"src_lang": src_lang, "tgt_lang": tgt_lang}
    ref = getattr(transformers_module, class_name).from_pretrained(folder, **kwargs)
    ours = getattr(spm_plugin, class_name).from_pretrained(folder, **kwargs)
    assert_same_vocabulary(ours, ref)
    assert_same_encodings(ours, ref)
    assert_same_encodings(ours, ref, texts=HELD_OUT[:6], text_target=HELD_OUT[6])
    sources, targets = HELD_OUT[:5], HELD_OUT[5:10]
    for options in ({}, {"padding": True}, {"padding": "max_length", "max_length": 30, "truncation": True}):
        assert dict(ours(sources, text_target=targets, **options)) == dict(ref(sources, text_target=targets, **options))
    # text_target alone, and switching src_lang afterwards, also match.
    assert dict(ours(text_target=targets)) == dict(ref(text_target=targets))
    ours.src_lang = ref.src_lang = "ro_RO"
    assert dict(ours(sources, text_target=targets)) == dict(ref(sources, text_target=targets))


def test_mbart_fairseq_layout(bpe_spm: Path, make_folder: Any) -> None:
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(bpe_spm))
    ours = spm_plugin.MBartTokenizer.from_pretrained(make_folder(bpe_spm, "sentencepiece.bpe.model"))
    assert ours.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]
    for spm_id in (3, 10, processor.get_piece_size() - 1):
        assert ours.convert_tokens_to_ids(processor.id_to_piece(spm_id)) == spm_id + 1
    assert ours.convert_tokens_to_ids("ar_AR") == processor.get_piece_size() + 1
    assert ours.mask_token_id == len(ours) - 1
    ids = ours("Salut lume", text_target="Hello world")
    assert ids["input_ids"][-2:] == [2, ours.lang_code_to_id["en_XX"]]
    fifty = spm_plugin.MBart50Tokenizer.from_pretrained(
        make_folder(bpe_spm, "sentencepiece.bpe.model"), src_lang="ro_RO", tgt_lang="de_DE"
    )
    encoded = fifty("Salut lume", text_target="Hallo Welt")
    assert encoded["input_ids"][0] == fifty.lang_code_to_id["ro_RO"] and encoded["input_ids"][-1] == 2
    assert encoded["labels"][0] == fifty.lang_code_to_id["de_DE"]


@pytest.mark.parametrize(
    "class_name", ["MBartTokenizer", "MBartTokenizerFast", "MBart50Tokenizer", "MBart50TokenizerFast"]
)
def test_auto_tokenizer_reads_src_and_tgt_lang_from_the_config(
    class_name: str, bpe_spm: Path, make_folder: Any, transformers_module: Any
) -> None:
    import microformers

    config = {"tokenizer_class": class_name, "src_lang": "fr_XX", "tgt_lang": "de_DE", "model_max_length": 64}
    folder = make_folder(bpe_spm, "sentencepiece.bpe.model", config)
    ours = microformers.AutoTokenizer.from_pretrained(folder)
    ref = transformers_module.AutoTokenizer.from_pretrained(folder)
    assert (ours.src_lang, ours.tgt_lang) == ("fr_XX", "de_DE")
    assert_same_encodings(ours, ref, texts=HELD_OUT, text_target=HELD_OUT[1])

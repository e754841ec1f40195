"""T5 (``spiece.model``, Unigram): ids, masks, padding, labels and decoding equal the reference's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spm_corpus import HELD_OUT
from spm_parity import assert_same_encodings, assert_same_vocabulary

from microformers_sentencepiece import T5Tokenizer

EXTRA_IDS = [f"<extra_id_{i}>" for i in range(100)]
HUB_LIKE_CONFIG = {
    "tokenizer_class": "T5Tokenizer",
    "extra_ids": 100,
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
    "model_max_length": 512,
    "additional_special_tokens": EXTRA_IDS,
}


@pytest.fixture(params=["model-only", "hub-like", "few-extra-ids"])
def t5_folder(request: pytest.FixtureRequest, t5_spm: Path, make_folder: Any) -> Path:
    if request.param == "model-only":
        return make_folder(t5_spm, "spiece.model")
    if request.param == "hub-like":
        return make_folder(t5_spm, "spiece.model", HUB_LIKE_CONFIG, {"additional_special_tokens": EXTRA_IDS})
    return make_folder(t5_spm, "spiece.model", {"tokenizer_class": "T5Tokenizer", "extra_ids": 7})


def test_t5_ids_masks_and_decoding_equal_the_reference(t5_folder: Path, transformers_module: Any) -> None:
    ref = transformers_module.T5Tokenizer.from_pretrained(t5_folder)
    ours = T5Tokenizer.from_pretrained(t5_folder)
    assert_same_vocabulary(ours, ref)
    assert_same_encodings(ours, ref)


def test_t5_appends_eos_pads_with_id_0_and_puts_sentinels_last(t5_spm: Path, make_folder: Any) -> None:
    ours = T5Tokenizer.from_pretrained(make_folder(t5_spm, "spiece.model"))
    ids = ours("Hallo Welt")["input_ids"]
    assert ids[-1] == ours.eos_token_id == 1
    assert ours.pad_token_id == 0
    assert ours.convert_tokens_to_ids("<extra_id_0>") == len(ours) - 1
    assert ours.convert_tokens_to_ids("<extra_id_99>") == len(ours) - 100
    assert len(ours.get_sentinel_tokens()) == 100
    batch = ours(["a", "a longer sentence here"], padding=True)
    assert batch["input_ids"][0][-1] == 0 and batch["attention_mask"][0][-1] == 0


def test_t5_text_target_gives_labels_like_the_reference(t5_folder: Path, transformers_module: Any) -> None:
    ref = transformers_module.T5Tokenizer.from_pretrained(t5_folder)
    ours = T5Tokenizer.from_pretrained(t5_folder)
    sources, targets = HELD_OUT[:5], HELD_OUT[5:10]
    for options in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 12}):
        assert dict(ours(sources, text_target=targets, **options)) == dict(ref(sources, text_target=targets, **options))
    assert dict(ours(text_target=targets[0])) == dict(ref(text_target=targets[0]))


def test_t5_fast_class_name_and_auto_tokenizer_load_the_same(
    t5_spm: Path, make_folder: Any, transformers_module: Any
) -> None:
    import microformers

    for class_name in ("T5Tokenizer", "T5TokenizerFast"):
        folder = make_folder(t5_spm, "spiece.model", {**HUB_LIKE_CONFIG, "tokenizer_class": class_name})
        ours = microformers.AutoTokenizer.from_pretrained(folder)
        assert type(ours).__name__ == "T5Tokenizer"
        ref = transformers_module.AutoTokenizer.from_pretrained(folder)
        assert_same_encodings(ours, ref, text_target=HELD_OUT[0])
    assert microformers.T5TokenizerFast.from_pretrained(folder)("x")["input_ids"] == ref("x")["input_ids"]

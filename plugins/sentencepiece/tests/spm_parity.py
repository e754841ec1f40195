"""Comparisons of a microformers tokenizer with the reference's on the same folder."""

from __future__ import annotations

from typing import Any

from spm_corpus import HELD_OUT

EXTRA_TEXTS = ["<extra_id_0> hello </s> x <mask> y", "en_XX ro_RO text", "Ünïcödé   spaces\u00a0and\u3000more"]


def assert_same_encodings(ours: Any, ref: Any, texts: list[str] | None = None, **call: Any) -> None:
    """Ids, masks and labels of every text alone, of the batch padded and truncated, and their decoding."""
    texts = texts if texts is not None else HELD_OUT + EXTRA_TEXTS
    for text in texts:
        expected, got = ref(text, **call), ours(text, **call)
        assert dict(got) == dict(expected), text
        for skip in (False, True):
            assert ours.decode(got["input_ids"], skip_special_tokens=skip) == ref.decode(
                expected["input_ids"], skip_special_tokens=skip
            ), text
        assert ours.convert_ids_to_tokens(got["input_ids"]) == ref.convert_ids_to_tokens(expected["input_ids"])
    for options in ({"padding": True}, {"padding": "max_length", "truncation": True, "max_length": 24}):
        assert dict(ours(texts, **call, **options)) == dict(ref(texts, **call, **options)), options
    half = len(texts) // 2
    pairs = (
        dict(ours(texts[:half], texts[half : 2 * half], padding=True)),
        dict(ref(texts[:half], texts[half : 2 * half], padding=True)),
    )
    assert pairs[0] == pairs[1]
    assert ours.batch_decode(ours(texts, padding=True)["input_ids"], skip_special_tokens=True) == ref.batch_decode(
        ref(texts, padding=True)["input_ids"], skip_special_tokens=True
    )


def assert_same_vocabulary(ours: Any, ref: Any) -> None:
    assert len(ours) == len(ref)
    assert ours.vocab_size == ref.vocab_size
    assert ours.get_vocab() == ref.get_vocab()
    assert ours.all_special_tokens == ref.all_special_tokens
    assert ours.all_special_ids == ref.all_special_ids
    for name in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"):
        assert getattr(ours, name) == getattr(ref, name), name
        assert getattr(ours, name + "_id") == getattr(ref, name + "_id"), name

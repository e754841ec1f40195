"""DistilBERT (microformers-distilbert) against the reference implementation on tiny random checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import (
    assert_close,
    assert_same_state_dict,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    max_abs_diff,
    padded_batch,
)

pytest.importorskip("transformers")


TINY: dict[str, Any] = {
    "vocab_size": 80,
    "dim": 32,
    "hidden_dim": 48,
    "n_layers": 2,
    "n_heads": 4,
    "max_position_embeddings": 32,
    "pad_token_id": 0,
}

# reference class -> (our Auto class, output fields to compare)
HEADS: dict[str, tuple[str, tuple[str, ...]]] = {
    "DistilBertModel": ("AutoModel", ("last_hidden_state",)),
    "DistilBertForMaskedLM": ("AutoModelForMaskedLM", ("logits",)),
    "DistilBertForSequenceClassification": ("AutoModelForSequenceClassification", ("logits",)),
    "DistilBertForTokenClassification": ("AutoModelForTokenClassification", ("logits",)),
    "DistilBertForQuestionAnswering": ("AutoModelForQuestionAnswering", ("start_logits", "end_logits")),
}


def _labels(head: str, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    batch, length = ids.shape
    if head == "DistilBertForMaskedLM":
        labels = ids.clone()
        labels[:, ::2] = -100
        return {"labels": labels}
    if head == "DistilBertForSequenceClassification":
        return {"labels": torch.randint(0, 2, (batch,), generator=generator)}
    if head == "DistilBertForTokenClassification":
        return {"labels": torch.randint(0, 2, (batch, length), generator=generator)}
    if head == "DistilBertForQuestionAnswering":
        return {
            "start_positions": torch.randint(0, length, (batch,), generator=generator),
            "end_positions": torch.randint(0, length, (batch,), generator=generator),
        }
    return {}


@pytest.mark.parametrize("head", HEADS)
def test_head_matches_reference_with_padding_and_loss(head: str, tmp_path: Path) -> None:
    auto, fields = HEADS[head]
    folder, reference = make_reference_checkpoint("DistilBertConfig", head, tmp_path, **TINY)
    ours = load_ours(folder, auto)
    assert type(ours).__name__ == head
    ids, mask = padded_batch(TINY["vocab_size"], [9, 6, 3], pad_token_id=0, seed=3, side="right")
    labels = _labels(head, ids)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, **labels)
        want = reference(ids, attention_mask=mask, **labels)
    per_token = head != "DistilBertForSequenceClassification"  # compare real tokens only; padding is free
    for field in fields:
        assert_close(getattr(got, field), getattr(want, field), atol=1e-4, what=field, mask=mask if per_token else None)
    if labels:
        assert_close(got.loss, want.loss, atol=1e-5, what="loss")


def test_hidden_states_attentions_and_checkpoints_both_ways(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(
        "DistilBertConfig", "DistilBertForMaskedLM", tmp_path, attn_implementation="eager", **TINY
    )
    ours = load_ours(folder, "AutoModelForMaskedLM")
    ids, mask = padded_batch(TINY["vocab_size"], [8, 5], pad_token_id=0, seed=4, side="right")
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        want = reference(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    assert len(got.hidden_states) == len(want.hidden_states) == TINY["n_layers"] + 1
    for i, (a, b) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(a, b, atol=1e-4, what=f"hidden_states[{i}]", mask=mask)
    assert len(got.attentions) == len(want.attentions) == TINY["n_layers"]
    for i, (a, b) in enumerate(zip(got.attentions, want.attentions)):
        assert_close(a, b, atol=1e-5, what=f"attentions[{i}]")

    ours.save_pretrained(tmp_path / "ours")
    again = load_reference(tmp_path / "ours", "AutoModelForMaskedLM")
    assert type(again).__name__ == "DistilBertForMaskedLM"
    assert_same_state_dict(dict(ours.state_dict()), dict(again.state_dict()))
    with torch.no_grad():
        assert max_abs_diff(again(ids, attention_mask=mask).logits, got.logits) <= 1e-5
    # the head-less folder loads into every head here, as with the reference
    base = load_ours(tmp_path / "ours", "AutoModel")
    reference_base = load_reference(folder, "AutoModel")
    with torch.no_grad():
        assert_close(base(ids).last_hidden_state, reference_base(ids).last_hidden_state, atol=1e-4)

"""Behaviour of ``microformers_generation.logits_process`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import torch

from microformers_generation.logits_process import MinLengthLogitsProcessor


def test_token_id_zero_is_a_valid_end_of_sequence_id() -> None:
    # many vocabularies use id 0 for a special token; a list holding it is accepted and masked
    processor = MinLengthLogitsProcessor(5, [0, 3])
    out = processor(torch.tensor([[1, 2]]), torch.zeros(1, 6))
    assert torch.isneginf(out[0, [0, 3]]).all() and torch.equal(out[0, [1, 2, 4, 5]], torch.zeros(4))

"""Tests written for mutants of the SDK that survived the mutation run (docs/reliability.md)."""

from __future__ import annotations

import pytest
import torch

from microformers import GenerationError
from microformers_sdk.masks import build_attention_mask, position_ids_from_attention_mask


def test_short_mask_error_names_cached_and_new_lengths() -> None:
    """Caught mutants: the cached/new lengths passed to the mask-length check (only the message used them)."""
    mask = torch.ones(2, 5, dtype=torch.long)
    expected = r"attention_mask has 5 columns but must cover the 5 cached and 1 new tokens \(6\)"
    with pytest.raises(GenerationError, match=expected):
        position_ids_from_attention_mask(mask, 5, 1)
    with pytest.raises(GenerationError, match=expected):
        build_attention_mask(mask, 1, 5)


def test_ready_made_4d_mask_is_returned_unchanged() -> None:
    """Caught mutant: ``attention_mask.dim() == 4`` -> ``== 5`` (a 4-D mask would be rebuilt or rejected)."""
    ready = torch.rand(2, 1, 3, 3) > 0.5
    mask, is_causal = build_attention_mask(ready, 3, 0)
    assert mask is ready and is_causal is False

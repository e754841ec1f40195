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

"""``microformers_sdk.gguf`` behaviour the full mutation run found unasserted (docs/reliability.md)."""

from __future__ import annotations

import pytest
import torch

from microformers_sdk.gguf import (
    OPTIONAL,
    REQUIRED,
    Meta,
    Reshape,
    Rotary,
)


def test_the_default_markers_read_as_their_names() -> None:
    assert repr(REQUIRED) == "REQUIRED" and repr(OPTIONAL) == "OPTIONAL"
    assert repr(Meta("embedding_length")) == "Meta(key='embedding_length', kind=<class 'int'>, default=REQUIRED)"


# -- transforms -----------------------------------------------------------------------------------


def test_rotary_apply_reorders_the_rows_of_a_matrix() -> None:
    weight = torch.arange(8 * 3).view(8, 3)  # 8 rows (2 heads of 2 rotary pairs), 3 columns
    out = Rotary("num_attention_heads").apply(weight, {"num_attention_heads": 2})
    assert torch.equal(out, weight[[0, 2, 1, 3, 4, 6, 5, 7]])
    assert Rotary("num_attention_heads").shape((8, 3), {"num_attention_heads": 2}) == (8, 3)


@pytest.mark.parametrize("heads", [0, -2])
def test_rotary_refuses_a_head_count_that_is_not_positive(heads: int) -> None:
    with pytest.raises(ValueError) as info:
        Rotary("num_key_value_heads").rows(8, {"num_key_value_heads": heads})
    assert str(info.value) == f"cannot split 8 attention rows into {heads} heads of rotary pairs (num_key_value_heads)"


def test_reshape_fills_in_a_leading_free_dimension_from_every_input_dimension() -> None:
    reshape = Reshape(shape=(-1, 4))
    shape = reshape.shape((2, 6), {})
    assert shape == (3, 4) and all(type(d) is int for d in shape)
    assert reshape.apply(torch.arange(12).view(2, 6), {}).shape == (3, 4)

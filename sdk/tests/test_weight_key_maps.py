"""``microformers_sdk.weights``: key maps for renamed checkpoint names and the missing-tensors message."""

from __future__ import annotations

import pytest

from microformers import CheckpointError
from microformers_sdk.weights import KeyRenamer, check_checkpoint_keys

# From test_weights_mutants.py: ``microformers_sdk.weights`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


def test_extend_key_map_adds_only_renamed_names_the_mapping_lacks() -> None:
    renamer = KeyRenamer([(r"\.gamma$", ".weight")])
    mapping = renamer.extend_key_map(
        {"ln.weight": "kept.weight"}, ["ln.weight", "other.weight", "unrelated"], ["ln.gamma", "other.gamma"]
    )
    assert mapping == {"ln.weight": "kept.weight", "other.weight": "other.gamma"}  # the existing entry is kept


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (8, "k0, k1, k2, k3, k4, k5, k6, k7"),
        (9, "k0, k1, k2, k3, k4, k5, k6, k7 and 1 more"),
        (11, "k0, k1, k2, k3, k4, k5, k6, k7 and 3 more"),
    ],
)
def test_the_missing_tensors_message_lists_eight_and_counts_the_rest(count: int, shown: str) -> None:
    with pytest.raises(CheckpointError) as info:
        check_checkpoint_keys([f"k{i}" for i in range(count)], [], source="x.safetensors")
    assert str(info.value) == (
        f"x.safetensors is missing {count} tensor(s): {shown}. The checkpoint is incomplete or was made for "
        "a different configuration; re-download or re-export it."
    )

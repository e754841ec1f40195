"""``microformers_sdk.processing`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import pytest

from microformers import ConfigError, InputError
from microformers_sdk.processing import SequenceFeatureExtractor


def _extractor(**kwargs: object) -> SequenceFeatureExtractor:
    return SequenceFeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, **kwargs)


def test_padding_side_is_taken_and_checked() -> None:
    left = _extractor(padding_side="left")
    assert left.padding_side == "left"
    padded = left.pad({"input_values": [[1.0, 2.0], [3.0]]})
    assert [list(row) for row in padded["input_values"]] == [[1.0, 2.0], [0.0, 3.0]]
    with pytest.raises(ConfigError, match=r"^padding_side='middle': use 'left' or 'right'$"):
        _extractor(padding_side="middle")


def test_bad_padding_and_truncation_arguments_are_named() -> None:
    extractor = _extractor()
    with pytest.raises(InputError) as info:
        extractor.pad({"input_values": [[1.0]]}, padding="everything")
    assert str(info.value) == "padding='everything': use True/'longest', 'max_length', or False/'do_not_pad'"
    with pytest.raises(InputError, match=r"^truncation=True needs max_length=\.\.\.$"):
        extractor.pad({"input_values": [[1.0]]}, truncation=True)

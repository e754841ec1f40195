"""``microformers_sdk.processing`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import pytest

from microformers import ConfigError, InputError
from microformers_sdk.processing import ProcessorMixin, SequenceFeatureExtractor


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


def test_scalar_features_are_kept_as_arrays() -> None:
    padded = _extractor().pad([{"input_values": [1.0, 2.0], "label": 1}, {"input_values": [3.0], "label": 0}])
    assert [int(x) for x in padded["label"]] == [1, 0]


class _Features:
    def pad(self, features: object, *args: object, **kwargs: object) -> dict:
        return {"input_values": ("padded", features, args, kwargs)}


class _Tokens:
    def pad(self, labels: object, **kwargs: object) -> dict:
        return {"input_ids": ("ids", labels, kwargs)}


def test_a_processor_pads_features_and_labels_with_their_own_components() -> None:
    processor = ProcessorMixin(feature_extractor=_Features(), tokenizer=_Tokens())
    both = processor.pad([1], labels=[2], padding=True)
    assert both == {"input_values": ("padded", [1], (), {"padding": True}), "labels": ("ids", [2], {"padding": True})}
    assert processor.pad(input_features=[1]) == {"input_values": ("padded", [1], (), {})}
    assert processor.pad(labels=[2]) == {"input_ids": ("ids", [2], {})}


def test_a_component_named_by_string_comes_from_the_processors_registry() -> None:
    cls = ProcessorMixin._component_class("Wav2Vec2FeatureExtractor", "feature extractor")
    assert cls.__name__ == "Wav2Vec2FeatureExtractor"
    assert ProcessorMixin._component_class(_Features, "feature extractor") is _Features

"""``DataCollatorCTCWithPadding``: batches for CTC fine-tuning (the ASR guide's collator).

Audio features and label ids are padded separately — features by the feature extractor (with its
``attention_mask``), labels by the tokenizer — and label padding becomes ``-100`` so the CTC loss
ignores it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from microformers.errors import InputError

__all__ = ["DataCollatorCTCWithPadding"]


@attrs.define
class DataCollatorCTCWithPadding:
    """``collator(features)`` with ``features`` a list of ``{"input_values": [...], "labels": [...]}``."""

    processor: Any
    padding: bool | str = "longest"
    max_length: int | None = None
    max_length_labels: int | None = None
    pad_to_multiple_of: int | None = None
    pad_to_multiple_of_labels: int | None = None
    label_pad_token_id: int = -100

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not features:
            raise InputError("DataCollatorCTCWithPadding got an empty batch")
        main = self.processor.feature_extractor.model_input_names[0]
        missing = [i for i, f in enumerate(features) if main not in f or "labels" not in f]
        if missing:
            raise InputError(
                f"DataCollatorCTCWithPadding: examples {missing[:5]} lack '{main}' or 'labels'; map the dataset with "
                f"processor(audio=..., sampling_rate=...).{main}[0] and processor(text=...).input_ids first"
            )
        batch = self.processor.feature_extractor.pad(
            [{main: f[main]} for f in features],
            padding=self.padding,
            max_length=self.max_length,
            pad_to_multiple_of=self.pad_to_multiple_of,
            return_attention_mask=True,
            return_tensors="pt",
        )
        labels = self.processor.tokenizer.pad(
            [{"input_ids": f["labels"]} for f in features],
            padding=self.padding,
            max_length=self.max_length_labels,
            pad_to_multiple_of=self.pad_to_multiple_of_labels,
            return_tensors="pt",
        )
        batch["labels"] = labels["input_ids"].masked_fill(labels["attention_mask"].ne(1), self.label_pad_token_id)
        return dict(batch)

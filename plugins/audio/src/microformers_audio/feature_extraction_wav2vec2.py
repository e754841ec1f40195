"""``Wav2Vec2FeatureExtractor``: raw 16 kHz waveforms -> ``input_values`` (zero-mean, unit-variance) + padding.

Same settings, file (``preprocessor_config.json``) and numbers as the reference implementation.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np

from microformers_sdk.processing import BatchFeature, SequenceFeatureExtractor, is_sequence_of_arrays

from .audio_io import (
    MAX_SAMPLES,
    AudioInputError,
    check_int_setting,
    check_sampling_rate,
    check_sampling_rate_setting,
)

logger = logging.getLogger("microformers")

__all__ = ["Wav2Vec2FeatureExtractor"]


class Wav2Vec2FeatureExtractor(SequenceFeatureExtractor):
    """Normalises each waveform to zero mean and unit variance (``do_normalize``) and pads batches.

    ``return_attention_mask`` defaults to False, as for the "group"-norm checkpoints that were trained
    without one; "layer"-norm checkpoints want ``return_attention_mask=True`` for padded batches.
    """

    model_input_names: ClassVar[list[str]] = ["input_values", "attention_mask"]

    def __init__(
        self,
        feature_size: int = 1,
        sampling_rate: int = 16000,
        padding_value: float = 0.0,
        return_attention_mask: bool = False,
        do_normalize: bool = True,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        feature_size = check_int_setting(feature_size, "feature_size", 1, 1024, owner)
        sampling_rate = check_sampling_rate_setting(sampling_rate, owner)
        super().__init__(feature_size=feature_size, sampling_rate=sampling_rate, padding_value=padding_value, **kwargs)
        self.return_attention_mask = return_attention_mask
        self.do_normalize = do_normalize

    @staticmethod
    def zero_mean_unit_var_norm(
        input_values: list[np.ndarray], attention_mask: list[np.ndarray] | None, padding_value: float = 0.0
    ) -> list[np.ndarray]:
        """Normalise each row over its real (unpadded) samples; padding is set back to ``padding_value``."""
        if attention_mask is None:
            return [(x - x.mean()) / np.sqrt(x.var() + 1e-7) for x in input_values]
        lengths = np.array(attention_mask, np.int32).sum(-1)
        normed = []
        for vector, length in zip(input_values, lengths):
            row = (vector - vector[:length].mean()) / np.sqrt(vector[:length].var() + 1e-7)
            if length < row.shape[0]:
                row[length:] = padding_value
            normed.append(row)
        return normed

    def __call__(
        self,
        raw_speech: Any,
        padding: bool | str = False,
        max_length: int | None = None,
        truncation: bool = False,
        pad_to_multiple_of: int | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | None = None,
        sampling_rate: int | None = None,
    ) -> BatchFeature:
        """Featurise one waveform or a batch (list of arrays/lists, or a 2-D array of equal-length rows)."""
        if sampling_rate is not None:
            sampling_rate = check_sampling_rate(sampling_rate)
        owner = type(self).__name__
        if max_length is not None:  # bounded before padding allocates it
            max_length = check_int_setting(max_length, "max_length", 1, MAX_SAMPLES, owner)
        if pad_to_multiple_of is not None:
            pad_to_multiple_of = check_int_setting(pad_to_multiple_of, "pad_to_multiple_of", 1, MAX_SAMPLES, owner)
        if sampling_rate is not None and sampling_rate != self.sampling_rate:
            raise AudioInputError(
                f"the audio is sampled at {sampling_rate} Hz but this feature extractor (and its model) expects "
                f"{self.sampling_rate} Hz; resample it first (e.g. soxr.resample(audio, {sampling_rate}, "
                f"{self.sampling_rate})) or pass {{'array': audio, 'sampling_rate': {sampling_rate}}} to the pipeline"
            )
        if sampling_rate is None:
            logger.warning(
                "Pass sampling_rate=... to %s() so a wrongly sampled input raises instead of silently degrading.",
                type(self).__name__,
            )
        if hasattr(raw_speech, "detach") and hasattr(raw_speech, "cpu"):
            raw_speech = raw_speech.detach().cpu().numpy()
        if isinstance(raw_speech, np.ndarray) and raw_speech.ndim > 2:
            raise AudioInputError(
                f"{type(self).__name__} takes mono audio; got an array of shape {raw_speech.shape}. "
                "Average the channels (audio.mean(axis=0) for (channels, samples)) first."
            )
        batched = is_sequence_of_arrays(raw_speech)
        rows = list(raw_speech) if batched else [raw_speech]
        for index, row in enumerate(rows):
            where = f"row {index} of the batch" if batched else "the audio"
            try:
                array = row if isinstance(row, np.ndarray) else np.asarray(row)
            except (TypeError, ValueError) as exc:  # a ragged list
                raise AudioInputError(f"{where} is not an array of samples ({exc}); pass 1-D float waveforms") from None
            if array.dtype.kind not in "biuf":
                raise AudioInputError(
                    f"{where} must be a waveform (numbers: a numpy array, list of floats or tensor) or a batch of "
                    f"them, got {type(row).__name__} of dtype {array.dtype}"
                )
            if array.ndim != 1:
                raise AudioInputError(
                    f"row {index} has shape {array.shape}; each waveform must be 1-D (mono). Average the channels first."
                )
            if len(array) == 0:
                raise AudioInputError(f"{where} is empty (0 samples); pass at least a few milliseconds of audio")
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise AudioInputError(
                    f"{where} holds NaN or infinite samples; clean the audio (e.g. np.nan_to_num) before featurising"
                )
        padded = self.pad(
            BatchFeature({"input_values": rows}),
            padding=padding,
            max_length=max_length,
            truncation=truncation,
            pad_to_multiple_of=pad_to_multiple_of,
            return_attention_mask=return_attention_mask,
        )
        values = padded["input_values"]
        if not isinstance(values[0], np.ndarray):
            padded["input_values"] = [np.asarray(v, dtype=np.float32) for v in values]
        elif not isinstance(values, np.ndarray) and values[0].dtype == np.float64:
            padded["input_values"] = [v.astype(np.float32) for v in values]
        elif isinstance(values, np.ndarray) and values.dtype == np.float64:
            padded["input_values"] = values.astype(np.float32)
        attention_mask = padded.get("attention_mask")
        if attention_mask is not None:
            padded["attention_mask"] = [np.asarray(m, dtype=np.int32) for m in attention_mask]
        if self.do_normalize:
            mask = attention_mask if self._padding_strategy(padding, max_length) != "do_not_pad" else None
            padded["input_values"] = self.zero_mean_unit_var_norm(
                padded["input_values"], attention_mask=mask, padding_value=self.padding_value
            )
        if return_tensors is not None:
            padded = padded.convert_to_tensors(return_tensors)
        return padded

"""``WhisperFeatureExtractor``: 16 kHz waveforms -> ``input_features``, log-mel spectrograms of 30 s windows.

Same settings, file (``preprocessor_config.json``) and numbers as the reference: audio padded with silence or
truncated to ``chunk_length`` seconds, a Hann-windowed STFT (``n_fft`` 400, hop 160) whose last frame is dropped,
power spectrum through Slaney mel filters (0-8 kHz), ``log10`` of values clamped at 1e-10, dynamic range
limited to 8 (``max(x, max - 8)``, per example) and rescaled as ``(x + 4) / 4``.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
import torch

from microformers.errors import ConfigError
from microformers_audio import MAX_SAMPLES, AudioInputError, check_int_setting, check_sampling_rate_setting
from microformers_sdk.processing import BatchFeature, SequenceFeatureExtractor, setting_source

logger = logging.getLogger("microformers")

__all__ = ["WhisperFeatureExtractor", "slaney_mel_filters"]


def _hz_to_slaney_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear (3 mels per 200 Hz) below 1 kHz, logarithmic above."""
    mels = 3.0 * freq / 200.0
    high = freq >= 1000.0
    mels[high] = 15.0 + np.log(freq[high] / 1000.0) * (27.0 / np.log(6.4))
    return mels


def _slaney_mel_to_hz(mels: np.ndarray) -> np.ndarray:
    freq = 200.0 * mels / 3.0
    high = mels >= 15.0
    freq[high] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels[high] - 15.0))
    return freq


def slaney_mel_filters(
    num_frequency_bins: int, num_mel_filters: int, sampling_rate: int, max_frequency: float = 8000.0
) -> np.ndarray:
    """``(num_frequency_bins, num_mel_filters)`` triangles on the Slaney scale from 0 Hz to ``max_frequency``, each
    divided by its width in Hz (Slaney normalisation: constant energy per channel), float64."""
    edges = np.linspace(0.0, _hz_to_slaney_mel(np.array([max_frequency]))[0], num_mel_filters + 2)
    centers = _slaney_mel_to_hz(edges)
    fft_freqs = np.linspace(0, sampling_rate // 2, num_frequency_bins)
    widths = np.diff(centers)
    distance = centers[None, :] - fft_freqs[:, None]
    rising = -distance[:, :-2] / widths[:-1]
    falling = distance[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    return filters * (2.0 / (centers[2:] - centers[:-2]))[None, :]


class WhisperFeatureExtractor(SequenceFeatureExtractor):
    """Log-mel features of ``feature_size`` bins (80, or 128 for large-v3) over ``chunk_length``-second windows."""

    model_input_names: ClassVar[list[str]] = ["input_features"]
    _transient_keys: ClassVar[tuple[str, ...]] = ("_processor_class", "mel_filters")

    def __init__(
        self,
        feature_size: int = 80,
        sampling_rate: int = 16000,
        hop_length: int = 160,
        chunk_length: int = 30,
        n_fft: int = 400,
        padding_value: float = 0.0,
        dither: float = 0.0,
        return_attention_mask: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("mel_filters", None)  # older files store the filters; they are recomputed from the settings
        kwargs.pop("n_samples", None)
        kwargs.pop("nb_max_frames", None)
        # every size below shapes an allocation (filters, windows, the padded batch): bounded before any is made
        owner = type(self).__name__
        feature_size = check_int_setting(feature_size, "feature_size", 1, 1024, owner)
        sampling_rate = check_sampling_rate_setting(sampling_rate, owner)
        n_fft = check_int_setting(n_fft, "n_fft", 2, 2**16, owner)
        hop_length = check_int_setting(hop_length, "hop_length", 1, 2**16, owner)
        chunk_length = check_int_setting(chunk_length, "chunk_length", 1, MAX_SAMPLES // sampling_rate, owner)
        if isinstance(dither, bool) or not isinstance(dither, (int, float)) or not np.isfinite(dither):
            raise ConfigError(
                f"{owner}: dither={dither!r} ({setting_source('dither')}) must be a finite number (0.0 turns it off)"
            )
        super().__init__(
            feature_size=feature_size,
            sampling_rate=sampling_rate,
            padding_value=padding_value,
            return_attention_mask=return_attention_mask,
            **kwargs,
        )
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.chunk_length = chunk_length
        self.n_samples = chunk_length * sampling_rate
        self.nb_max_frames = self.n_samples // hop_length
        self.dither = dither
        self.mel_filters = slaney_mel_filters(1 + n_fft // 2, feature_size, sampling_rate)

    def _log_mel(self, waveforms: np.ndarray, device: str = "cpu") -> np.ndarray:
        """``(batch, samples)`` -> ``(batch, feature_size, samples // hop_length)`` log-mel features."""
        waveform = torch.from_numpy(waveforms).to(device, torch.float32)
        window = torch.hann_window(self.n_fft, device=device)
        if self.dither != 0.0:
            waveform = waveform + self.dither * torch.randn(waveform.shape, dtype=waveform.dtype, device=device)
        stft = torch.stft(waveform, self.n_fft, self.hop_length, window=window, return_complex=True)
        magnitudes = (stft[..., :-1].abs() ** 2).contiguous()
        mel_filters = torch.from_numpy(self.mel_filters).to(device, torch.float32)
        log_spec = torch.clamp(mel_filters.T @ magnitudes, min=1e-10).log10()
        peak = log_spec.amax(dim=(1, 2), keepdim=True)
        log_spec = (torch.maximum(log_spec, peak - 8.0) + 4.0) / 4.0
        return log_spec.cpu().numpy()

    @staticmethod
    def zero_mean_unit_var_norm(
        input_values: list[np.ndarray], attention_mask: np.ndarray | None, padding_value: float = 0.0
    ) -> list[np.ndarray]:
        """Normalise each row over its real (unpadded) samples; padding is set back to ``padding_value``."""
        if attention_mask is None:
            return [(x - x.mean()) / np.sqrt(x.var() + 1e-7) for x in input_values]
        normed = []
        for vector, length in zip(input_values, np.asarray(attention_mask, np.int32).sum(-1)):
            row = (vector - vector[:length].mean()) / np.sqrt(vector[:length].var() + 1e-7)
            if length < row.shape[0]:
                row[length:] = padding_value
            normed.append(row)
        return normed

    def _rows(self, raw_speech: Any) -> list[np.ndarray]:
        """One float32 1-D array per example, refusing what cannot be audio."""
        if isinstance(raw_speech, torch.Tensor):
            raw_speech = raw_speech.detach().cpu().numpy()
        if isinstance(raw_speech, np.ndarray):
            if raw_speech.ndim > 2:
                raise AudioInputError(
                    f"{type(self).__name__} takes mono audio; raw_speech has shape {raw_speech.shape}. Average the "
                    "channels (audio.mean(axis=0) for (channels, samples)) first."
                )
            rows = list(raw_speech) if raw_speech.ndim == 2 else [raw_speech]
        elif (
            isinstance(raw_speech, (list, tuple))
            and raw_speech
            and isinstance(raw_speech[0], (np.ndarray, list, tuple, torch.Tensor))
        ):
            rows = [r.detach().cpu().numpy() if isinstance(r, torch.Tensor) else r for r in raw_speech]
        elif isinstance(raw_speech, (list, tuple)):
            rows = [raw_speech]
        else:
            raise AudioInputError(
                f"raw_speech must be a waveform (numpy array, list of floats, tensor) or a batch of them, got "
                f"{type(raw_speech).__name__}"
            )
        arrays = []
        for index, row in enumerate(rows):
            array = np.asarray(row, dtype=np.float32)
            where = f"row {index} of raw_speech" if len(rows) > 1 else "raw_speech"
            if array.ndim != 1:
                raise AudioInputError(f"{where} has shape {array.shape}; each waveform must be 1-D (mono)")
            if array.size == 0:
                raise AudioInputError(f"{where} is empty (0 samples); pass at least a few milliseconds of audio")
            if not np.isfinite(array).all():
                raise AudioInputError(
                    f"{where} holds NaN or infinite samples; clean the audio (e.g. np.nan_to_num) before featurising"
                )
            arrays.append(array)
        return arrays

    def __call__(
        self,
        raw_speech: Any,
        truncation: bool = True,
        pad_to_multiple_of: int | None = None,
        return_tensors: str | None = None,
        return_attention_mask: bool | None = None,
        padding: bool | str | None = "max_length",
        max_length: int | None = None,
        sampling_rate: int | None = None,
        do_normalize: bool | None = None,
        device: str | None = "cpu",
        **kwargs: Any,
    ) -> BatchFeature:
        """Featurise one waveform or a batch: ``input_features`` ``(batch, feature_size, frames)`` (3000 frames for
        30 s), and with ``return_attention_mask`` a per-frame mask of the real audio."""
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
        if max_length is not None:
            max_length = check_int_setting(max_length, "max_length", 1, MAX_SAMPLES, type(self).__name__)
        if pad_to_multiple_of is not None:
            pad_to_multiple_of = check_int_setting(
                pad_to_multiple_of, "pad_to_multiple_of", 1, MAX_SAMPLES, type(self).__name__
            )
        rows = self._rows(raw_speech)
        lengths = [len(row) for row in rows]
        limit = max_length or self.n_samples
        if padding == "max_length":
            target = limit
        elif padding in (True, "longest"):
            target = min(max(lengths), limit) if truncation else max(lengths)
        else:
            kept = {min(n, limit) if truncation else n for n in lengths}
            if len(kept) > 1:
                raise AudioInputError(
                    f"padding={padding!r} with rows of different lengths {lengths}; pass padding='longest' or "
                    "'max_length'"
                )
            target = kept.pop()
        if pad_to_multiple_of and target % pad_to_multiple_of:
            target = (target // pad_to_multiple_of + 1) * pad_to_multiple_of
        batch = np.full((len(rows), target), self.padding_value, dtype=np.float32)
        mask = np.zeros((len(rows), target), dtype=np.int32)
        for index, row in enumerate(rows):
            if len(row) > target and not truncation:
                raise AudioInputError(
                    f"raw_speech row {index} has {len(row)} samples, more than max_length={target}, and "
                    "truncation=False; pass truncation=True or use the pipeline's chunk_length_s for long audio"
                )
            kept = row[:target]
            batch[index, : len(kept)] = kept
            mask[index, : len(kept)] = 1
        if do_normalize:
            batch = np.stack(self.zero_mean_unit_var_norm(list(batch), mask, self.padding_value))
        features = BatchFeature({"input_features": self._log_mel(batch, device or "cpu")})
        want_mask = self.return_attention_mask if return_attention_mask is None else return_attention_mask
        if want_mask:
            frames = mask[:, :: self.hop_length]
            if target % self.hop_length != 0:
                frames = frames[:, :-1]
            features["attention_mask"] = frames
        elif do_normalize:  # the reference hands back the per-sample mask it normalised with
            features["attention_mask"] = mask
        if return_tensors is not None:
            features = features.convert_to_tensors(return_tensors)
        return features

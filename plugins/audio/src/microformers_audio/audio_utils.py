"""Signal-processing helpers for audio feature extractors (numpy, float64 inside).

Same names, arguments and numbers as the reference implementation's ``audio_utils``: mel scales
(``htk``, ``kaldi``, ``slaney``), triangular mel filter banks (optionally Slaney-normalised or built in
mel space), analysis windows, the short-time Fourier transform ``spectrogram`` (amplitude, power,
complex, mel, log-mel) and decibel conversions. The STFT is computed for all frames at once.
"""

from __future__ import annotations

import warnings

import numpy as np

from microformers.errors import InputError

__all__ = [
    "amplitude_to_db",
    "hertz_to_mel",
    "mel_filter_bank",
    "mel_to_hertz",
    "optimal_fft_length",
    "power_to_db",
    "spectrogram",
    "window_function",
]

_MEL_SCALES = ("htk", "kaldi", "slaney")
# Slaney's scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
_SLANEY_MIN_LOG_HZ = 1000.0
_SLANEY_MIN_LOG_MEL = 15.0
_SLANEY_LOG_STEP = 27.0 / np.log(6.4)


def _check_scale(mel_scale: str) -> None:
    if mel_scale not in _MEL_SCALES:
        raise InputError(f"mel_scale={mel_scale!r}: use one of {', '.join(_MEL_SCALES)}")


def hertz_to_mel(freq: float | np.ndarray, mel_scale: str = "htk") -> float | np.ndarray:
    """Frequencies in Hz -> mels on the ``htk``, ``kaldi`` or ``slaney`` scale."""
    _check_scale(mel_scale)
    if mel_scale == "htk":
        return 2595.0 * np.log10(1.0 + freq / 700.0)
    if mel_scale == "kaldi":
        return 1127.0 * np.log(1.0 + freq / 700.0)
    mels = 3.0 * freq / 200.0
    if isinstance(freq, np.ndarray) and freq.ndim:
        high = freq >= _SLANEY_MIN_LOG_HZ
        mels[high] = _SLANEY_MIN_LOG_MEL + np.log(freq[high] / _SLANEY_MIN_LOG_HZ) * _SLANEY_LOG_STEP
    elif freq >= _SLANEY_MIN_LOG_HZ:
        mels = _SLANEY_MIN_LOG_MEL + np.log(freq / _SLANEY_MIN_LOG_HZ) * _SLANEY_LOG_STEP
    return mels


def mel_to_hertz(mels: float | np.ndarray, mel_scale: str = "htk") -> float | np.ndarray:
    """Mels -> Hz, the inverse of :func:`hertz_to_mel`."""
    _check_scale(mel_scale)
    if mel_scale == "htk":
        return 700.0 * (np.power(10, mels / 2595.0) - 1.0)
    if mel_scale == "kaldi":
        return 700.0 * (np.exp(mels / 1127.0) - 1.0)
    step = np.log(6.4) / 27.0
    freq = 200.0 * mels / 3.0
    if isinstance(mels, np.ndarray) and mels.ndim:
        high = mels >= _SLANEY_MIN_LOG_MEL
        freq[high] = _SLANEY_MIN_LOG_HZ * np.exp(step * (mels[high] - _SLANEY_MIN_LOG_MEL))
    elif mels >= _SLANEY_MIN_LOG_MEL:
        freq = _SLANEY_MIN_LOG_HZ * np.exp(step * (mels - _SLANEY_MIN_LOG_MEL))
    return freq


def _triangular_filters(fft_freqs: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """``(num_bins, num_filters)``: filter ``i`` rises from ``centers[i]`` to ``centers[i+1]``, falls to ``[i+2]``."""
    widths = np.diff(centers)
    distance = centers[None, :] - fft_freqs[:, None]
    rising = -distance[:, :-2] / widths[:-1]
    falling = distance[:, 2:] / widths[1:]
    return np.maximum(np.zeros(1), np.minimum(rising, falling))


def mel_filter_bank(
    num_frequency_bins: int,
    num_mel_filters: int,
    min_frequency: float,
    max_frequency: float,
    sampling_rate: int,
    norm: str | None = None,
    mel_scale: str = "htk",
    triangularize_in_mel_space: bool = False,
    dtype: str | np.dtype = np.float64,
) -> np.ndarray:
    """A ``(num_frequency_bins, num_mel_filters)`` matrix turning a spectrogram into a mel spectrogram.

    ``norm="slaney"`` divides each triangle by its width in Hz (constant energy per channel);
    ``triangularize_in_mel_space`` draws the triangles on the mel axis (torchaudio's convention).
    """
    if norm is not None and norm != "slaney":
        raise InputError(f"norm={norm!r}: use None or 'slaney'")
    if num_frequency_bins < 2:
        raise InputError(f"num_frequency_bins={num_frequency_bins}: need at least 2")
    if min_frequency > max_frequency:
        raise InputError(f"min_frequency={min_frequency} must not exceed max_frequency={max_frequency}")
    mel_points = np.linspace(
        hertz_to_mel(min_frequency, mel_scale=mel_scale),
        hertz_to_mel(max_frequency, mel_scale=mel_scale),
        num_mel_filters + 2,
    )
    centers_hz = mel_to_hertz(mel_points, mel_scale=mel_scale)
    if triangularize_in_mel_space:
        bin_width = sampling_rate / ((num_frequency_bins - 1) * 2)
        fft_freqs = hertz_to_mel(bin_width * np.arange(num_frequency_bins), mel_scale=mel_scale)
        centers = mel_points
    else:
        fft_freqs = np.linspace(0, sampling_rate // 2, num_frequency_bins)
        centers = centers_hz
    filters = _triangular_filters(fft_freqs, centers).astype(dtype, copy=False)
    if norm == "slaney":
        filters *= (2.0 / (centers_hz[2 : num_mel_filters + 2] - centers_hz[:num_mel_filters]))[None, :]
    if (filters.max(axis=0) == 0.0).any():
        warnings.warn(
            f"At least one mel filter has all zero values: num_mel_filters={num_mel_filters} may be too high "
            f"or num_frequency_bins={num_frequency_bins} too low.",
            stacklevel=2,
        )
    return filters


def optimal_fft_length(window_length: int) -> int:
    """The next power of two at or above ``window_length`` (the fastest FFT size)."""
    return 2 ** int(np.ceil(np.log2(window_length)))


def window_function(
    window_length: int,
    name: str = "hann",
    periodic: bool = True,
    frame_length: int | None = None,
    center: bool = True,
) -> np.ndarray:
    """``boxcar``, ``hamming``, ``hann`` or ``povey`` window, zero-padded to ``frame_length`` when given."""
    length = window_length + 1 if periodic else window_length
    if name == "boxcar":
        window = np.ones(length)
    elif name in ("hamming", "hamming_window"):
        window = np.hamming(length)
    elif name in ("hann", "hann_window"):
        window = np.hanning(length)
    elif name == "povey":
        window = np.power(np.hanning(length), 0.85)
    else:
        raise InputError(f"window name {name!r} is unknown; use 'boxcar', 'hamming', 'hann' or 'povey'")
    if periodic:
        window = window[:-1]
    if frame_length is None:
        return window
    if window_length > frame_length:
        raise InputError(f"window_length={window_length} may not exceed frame_length={frame_length}")
    padded = np.zeros(frame_length)
    offset = (frame_length - window_length) // 2 if center else 0
    padded[offset : offset + window_length] = window
    return padded


def spectrogram(
    waveform: np.ndarray,
    window: np.ndarray,
    frame_length: int,
    hop_length: int,
    fft_length: int | None = None,
    power: float | None = 1.0,
    center: bool = True,
    pad_mode: str = "reflect",
    onesided: bool = True,
    dither: float = 0.0,
    preemphasis: float | None = None,
    mel_filters: np.ndarray | None = None,
    mel_floor: float = 1e-10,
    log_mel: str | None = None,
    reference: float = 1.0,
    min_value: float = 1e-10,
    db_range: float | None = None,
    remove_dc_offset: bool = False,
    dtype: np.dtype = np.float32,
) -> np.ndarray:
    """Short-time Fourier transform of one waveform: ``(num_frequency_bins or num_mel_filters, num_frames)``.

    ``power`` 1.0 gives amplitudes, 2.0 power, ``None`` complex values; ``mel_filters`` projects onto
    mel bins (floored at ``mel_floor``); ``log_mel`` is ``"log"``, ``"log10"`` or ``"dB"``.
    """
    if fft_length is None:
        fft_length = frame_length
    if frame_length > fft_length:
        raise InputError(f"frame_length={frame_length} may not exceed fft_length={fft_length}")
    if len(window) != frame_length:
        raise InputError(f"the window has {len(window)} samples but frame_length={frame_length}; they must match")
    if hop_length <= 0:
        raise InputError(f"hop_length={hop_length} must be greater than zero")
    if waveform.ndim != 1:
        raise InputError(f"spectrogram takes a 1-D waveform, got shape {waveform.shape}; pass one channel")
    if np.iscomplexobj(waveform):
        raise InputError("complex-valued waveforms are not supported")
    if power is None and mel_filters is not None:
        raise InputError("mel_filters need a real spectrogram: pass power=1.0 or 2.0, not None")
    if center:
        half = int(frame_length // 2)
        waveform = np.pad(waveform, [(half, half)], mode=pad_mode)
    waveform = waveform.astype(np.float64)
    num_frames = int(1 + np.floor((waveform.size - frame_length) / hop_length))
    starts = np.arange(num_frames) * hop_length
    frames = waveform[starts[:, None] + np.arange(frame_length)[None, :]]
    if dither != 0.0:
        frames = frames + dither * np.random.randn(num_frames, frame_length)
    if remove_dc_offset:
        frames = frames - frames.mean(axis=1, keepdims=True)
    if preemphasis is not None:
        frames = np.concatenate(
            [frames[:, :1] * (1 - preemphasis), frames[:, 1:] - preemphasis * frames[:, :-1]], axis=1
        )
    frames = frames * window.astype(np.float64)
    buffer = np.zeros((num_frames, fft_length))
    buffer[:, :frame_length] = frames
    spectrum = (np.fft.rfft(buffer, axis=1) if onesided else np.fft.fft(buffer, axis=1)).astype(np.complex64)
    result: np.ndarray = spectrum
    if power is not None:
        result = np.abs(spectrum, dtype=np.float64) ** power
    result = result.T
    if mel_filters is not None:
        result = np.maximum(mel_floor, np.dot(mel_filters.T, result))
    if power is not None and log_mel is not None:
        if log_mel == "log":
            result = np.log(result)
        elif log_mel == "log10":
            result = np.log10(result)
        elif log_mel == "dB":
            if power == 1.0:
                result = amplitude_to_db(result, reference, min_value, db_range)
            elif power == 2.0:
                result = power_to_db(result, reference, min_value, db_range)
            else:
                raise InputError(f"log_mel='dB' needs power 1.0 or 2.0, got power={power}")
        else:
            raise InputError(f"log_mel={log_mel!r}: use None, 'log', 'log10' or 'dB'")
        result = np.asarray(result, dtype)
    return result


def _to_db(
    spectrogram: np.ndarray, factor: float, reference: float, min_value: float, db_range: float | None
) -> np.ndarray:
    if reference <= 0.0:
        raise InputError(f"reference={reference} must be greater than zero")
    if min_value <= 0.0:
        raise InputError(f"min_value={min_value} must be greater than zero")
    reference = max(min_value, reference)
    spectrogram = np.clip(spectrogram, a_min=min_value, a_max=None)
    spectrogram = factor * (np.log10(spectrogram) - np.log10(reference))
    if db_range is not None:
        if db_range <= 0.0:
            raise InputError(f"db_range={db_range} must be greater than zero")
        spectrogram = np.clip(spectrogram, a_min=spectrogram.max() - db_range, a_max=None)
    return spectrogram


def power_to_db(
    spectrogram: np.ndarray, reference: float = 1.0, min_value: float = 1e-10, db_range: float | None = None
) -> np.ndarray:
    """``10 * log10(spectrogram / reference)``, floored at ``min_value`` and optionally ``db_range`` below the peak."""
    return _to_db(spectrogram, 10.0, reference, min_value, db_range)


def amplitude_to_db(
    spectrogram: np.ndarray, reference: float = 1.0, min_value: float = 1e-5, db_range: float | None = None
) -> np.ndarray:
    """``20 * log10(spectrogram / reference)``, floored at ``min_value`` and optionally ``db_range`` below the peak."""
    return _to_db(spectrogram, 20.0, reference, min_value, db_range)

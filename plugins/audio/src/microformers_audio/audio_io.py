"""Reading audio inputs: files and bytes (``soundfile``), arrays, and ``{"array"/"raw", "sampling_rate"}`` dicts.

Everything ends as a 1-D float32 numpy array at the wanted sampling rate. Rules:

- A file or bytes is decoded by ``soundfile`` (WAV, FLAC, OGG/Vorbis, MP3 with libsndfile >= 1.1);
  its channels are averaged to mono, and it is resampled with ``soxr`` when its rate differs.
- A 1-D array is taken to be at the wanted rate already.
- A 2-D array is read as ``(channels, samples)`` with at most 2 channels and averaged to mono (as the
  reference pipeline does); any other layout is an error that says how to fix it.
- A dict gives its own ``sampling_rate``; audio at another rate is resampled with ``soxr`` (high quality).
- Empty audio is an error.
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from microformers.errors import FileMissingError, InputError

__all__ = ["AudioInputError", "load_audio", "resample", "to_mono"]


class AudioInputError(InputError):
    """An audio input cannot be read or has an unusable shape, rate or length."""


def to_mono(array: np.ndarray, what: str = "audio") -> np.ndarray:
    """``(samples,)`` as is; ``(channels, samples)`` with 1-2 channels averaged; anything else refused."""
    if array.ndim == 1:
        return array
    if array.ndim != 2:
        raise AudioInputError(
            f"{what} has shape {tuple(array.shape)}; pass mono audio as (samples,) or multi-channel audio as "
            "(channels, samples)"
        )
    if array.shape[0] > 2:
        raise AudioInputError(
            f"{what} has shape {tuple(array.shape)} and axis 0 is read as channels ({array.shape[0]} of them). "
            "If the array is (samples, channels) — what soundfile.read returns — pass array.T; if it really has "
            "more than 2 channels, mix it down to mono yourself."
        )
    return array.mean(axis=0)


def resample(array: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Resample 1-D audio with ``soxr`` (its high-quality setting)."""
    if from_rate == to_rate:
        return array
    if not isinstance(from_rate, (int, np.integer)) or from_rate <= 0:
        raise AudioInputError(f"sampling_rate={from_rate!r} must be a positive integer (samples per second)")
    try:
        import soxr
    except ImportError as exc:  # pragma: no cover - soxr is a dependency of this plugin
        raise AudioInputError(
            f"audio at {from_rate} Hz must be resampled to {to_rate} Hz, which needs the 'soxr' package: "
            "pip install soxr (or resample it yourself and pass the array at the right rate)"
        ) from exc
    return soxr.resample(np.asarray(array, dtype=np.float32), from_rate, to_rate, quality="HQ")


def _decode(source: str | bytes, what: str) -> tuple[np.ndarray, int]:
    import soundfile

    try:
        data, rate = soundfile.read(
            io.BytesIO(source) if isinstance(source, bytes) else source, dtype="float32", always_2d=True
        )
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise AudioInputError(
            f"{what} is not an audio file soundfile can read ({exc}). Pass a WAV/FLAC/OGG file, or decode it "
            "yourself and pass {'array': samples, 'sampling_rate': rate}."
        ) from exc
    return data.T, int(rate)


def load_audio(inputs: Any, sampling_rate: int) -> tuple[np.ndarray, dict[str, Any]]:
    """``(1-D float audio at sampling_rate, extra keys of a dict input)``; see the module docstring."""
    extra: dict[str, Any] = {}
    what = "the audio input"
    if isinstance(inputs, (str, os.PathLike)):
        path = os.fspath(inputs)
        if path.startswith(("http://", "https://")):
            raise AudioInputError(f"{path}: URLs are not fetched; download the file and pass its path")
        if not os.path.isfile(path):
            raise FileMissingError(f"audio file {path} does not exist; pass the path of a WAV/FLAC/OGG file")
        what = f"audio file {path}"
        data, rate = _decode(path, what)
        inputs = resample(to_mono(data, what), rate, sampling_rate)
    elif isinstance(inputs, (bytes, bytearray)):
        what = f"the audio bytes ({len(inputs)} bytes)"
        data, rate = _decode(bytes(inputs), what)
        inputs = resample(to_mono(data, what), rate, sampling_rate)
    elif isinstance(inputs, dict):
        inputs = dict(inputs)
        if "sampling_rate" not in inputs or not ("raw" in inputs or "array" in inputs):
            raise AudioInputError(
                "a dict audio input needs the samples under 'raw' (or 'array') and their rate under "
                f"'sampling_rate'; got keys {sorted(inputs)}"
            )
        array = inputs.pop("raw", None)
        if array is None:
            inputs.pop("path", None)
            array = inputs.pop("array")
        rate = inputs.pop("sampling_rate")
        extra = inputs
        array = to_mono(_as_numpy(array, what), what)
        inputs = resample(array, rate, sampling_rate)
    else:
        inputs = to_mono(_as_numpy(inputs, what), what)
    if inputs.shape[0] == 0:
        raise AudioInputError(f"{what} is empty (0 samples); pass at least a few milliseconds of audio")
    return inputs, extra


def _as_numpy(value: Any, what: str) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    if isinstance(value, list):
        value = np.asarray(value, dtype=np.float32)
    if not isinstance(value, np.ndarray):
        raise AudioInputError(
            f"{what} is a {type(value).__name__}; pass a file path, bytes, a 1-D numpy array or torch tensor, or "
            "{'array': samples, 'sampling_rate': rate}"
        )
    if not np.issubdtype(value.dtype, np.number):
        raise AudioInputError(f"{what} has dtype {value.dtype}; pass float samples")
    return value

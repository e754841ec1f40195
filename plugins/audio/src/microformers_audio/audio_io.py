"""Reading audio inputs: files and bytes (``soundfile``), arrays, and ``{"array"/"raw", "sampling_rate"}`` dicts.

Everything ends as a 1-D float32 numpy array at the wanted sampling rate. Rules:

- A file or bytes is decoded by ``soundfile`` (WAV, FLAC, OGG/Vorbis, MP3 with libsndfile >= 1.1);
  its channels are averaged to mono, and it is resampled with ``soxr`` when its rate differs.
- A 1-D array is taken to be at the wanted rate already.
- A 2-D array is read as ``(channels, samples)`` with at most 2 channels and averaged to mono (as the
  reference pipeline does); any other layout is an error that says how to fix it.
- A dict gives its own ``sampling_rate``; audio at another rate is resampled with ``soxr`` (high quality).
- Empty audio is an error.
- Sizes are checked before anything is decoded, resampled or allocated: a sampling rate must be an integer from
  1 Hz to ``MAX_SAMPLING_RATE``; the samples a file declares (``soundfile.info``) and the samples resampling would
  produce must stay under ``MAX_SAMPLES`` and fit in half the available memory; a caller (a pipeline) can add its own
  bound on the length at the wanted rate with ``check_length``.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from microformers.devices import available_memory
from microformers.errors import ConfigError, FileMissingError, InputError
from microformers_sdk.processing import setting_source

__all__ = [
    "MAX_SAMPLES",
    "MAX_SAMPLING_RATE",
    "AudioInputError",
    "check_int_setting",
    "check_sampling_rate",
    "check_sampling_rate_setting",
    "load_audio",
    "resample",
    "to_mono",
]

# Above every rate audio hardware records (768 kHz) with margin; a larger "rate" is a corrupt header or a mistake,
# and soxr would spend unbounded time designing a filter for it.
MAX_SAMPLING_RATE = 10_000_000
# 2**30 float32 samples are 4 GiB: more than 18 hours at 16 kHz. Longer audio is cut into files by the caller.
MAX_SAMPLES = 2**30
# A decoded or resampled signal may take at most this share of the available memory.
_MEMORY_SHARE = 0.5


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


def check_sampling_rate(rate: Any, name: str = "sampling_rate") -> int:
    """``rate`` as an int when it is an integer from 1 Hz to ``MAX_SAMPLING_RATE``; otherwise an error naming it."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or not 1 <= rate <= MAX_SAMPLING_RATE:
        raise AudioInputError(
            f"{name}={rate!r} must be a positive integer number of samples per second, at most "
            f"{MAX_SAMPLING_RATE:,} (audio is recorded at 8,000 to 768,000 Hz)"
        )
    return int(rate)


def check_int_setting(value: Any, name: str, low: int, high: int, owner: str) -> int:
    """A feature extractor's integer setting ``name`` as an int within ``[low, high]``; otherwise a ``ConfigError``
    naming it and where it came from (the ``preprocessor_config.json`` it was read from, or the argument), before
    anything is sized by it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ConfigError(
            f"{owner}: {name}={value!r} ({setting_source(name)}) must be an integer from {low:,} to {high:,}; "
            "fix the setting"
        )
    return int(value)


def check_sampling_rate_setting(rate: Any, owner: str) -> int:
    """A feature extractor's ``sampling_rate`` setting checked as ``check_sampling_rate`` does; a ``ConfigError``
    naming where it came from (the ``preprocessor_config.json`` it was read from, or the argument)."""
    try:
        return check_sampling_rate(rate)
    except AudioInputError as exc:
        raise ConfigError(f"{owner}: {exc} ({setting_source('sampling_rate')})") from None


def _check_samples(
    count: int, what: str, doing: str, fix: str = "check its sampling rate, or cut it into shorter files"
) -> None:
    """Refuse ``count`` samples (what ``doing`` would produce) over ``MAX_SAMPLES`` or half the available memory."""
    if count > MAX_SAMPLES:
        raise AudioInputError(
            f"{what}: {doing} gives {count:,} samples, more than the {MAX_SAMPLES:,} this library handles in one "
            f"piece; {fix}"
        )
    available = available_memory()
    needed = count * 4  # float32
    if available is not None and needed > _MEMORY_SHARE * available:
        raise AudioInputError(
            f"{what}: {doing} gives {count:,} samples ({needed / 2**30:.1f} GiB), more than half the "
            f"{available / 2**30:.1f} GiB of memory available; {fix}"
        )


def resampled_length(num_samples: int, from_rate: int, to_rate: int) -> int:
    """How many samples ``num_samples`` at ``from_rate`` become at ``to_rate`` (soxr's rounding, +-1)."""
    return math.ceil(num_samples * to_rate / from_rate)


def resample(
    array: np.ndarray, from_rate: int, to_rate: int, what: str = "the audio input", name: str = "sampling_rate"
) -> np.ndarray:
    """Resample 1-D audio with ``soxr`` (its high-quality setting), after checking the rates and the new length."""
    from_rate = check_sampling_rate(from_rate, name)
    to_rate = check_sampling_rate(to_rate, "the feature extractor's sampling_rate")
    if from_rate == to_rate:
        return array
    _check_samples(
        resampled_length(array.shape[-1], from_rate, to_rate), what, f"resampling from {from_rate} to {to_rate} Hz"
    )
    try:
        import soxr
    except ImportError as exc:  # pragma: no cover - soxr is a dependency of this plugin
        raise AudioInputError(
            f"audio at {from_rate} Hz must be resampled to {to_rate} Hz, which needs the 'soxr' package: "
            "pip install soxr (or resample it yourself and pass the array at the right rate)"
        ) from exc
    return soxr.resample(np.asarray(array, dtype=np.float32), from_rate, to_rate, quality="HQ")


def _not_audio(what: str, exc: Exception) -> AudioInputError:
    return AudioInputError(
        f"{what} is not an audio file soundfile can read ({exc}). Pass a WAV/FLAC/OGG file, or decode it "
        "yourself and pass {'array': samples, 'sampling_rate': rate}."
    )


def _read(source: str | bytes) -> tuple[np.ndarray, int]:
    """The decoder itself: ``(frames, channels)`` float32 samples and their rate."""
    import soundfile

    return soundfile.read(io.BytesIO(source) if isinstance(source, bytes) else source, dtype="float32", always_2d=True)


def _decode(source: str | bytes, what: str, to_rate: int, announce: Callable[[int], None]) -> tuple[np.ndarray, int]:
    """Decode after checking what the header declares: its rate, and its samples before and after resampling."""
    import soundfile

    errors = (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError)
    try:
        info = soundfile.info(io.BytesIO(source) if isinstance(source, bytes) else source)
    except errors as exc:
        raise _not_audio(what, exc) from exc
    rate = check_sampling_rate(info.samplerate, f"the sampling rate in {what}'s header")
    frames, channels = int(info.frames), max(int(info.channels), 1)
    if frames > 0:  # -1 or 0 where the format does not say; the decoder's own growth is then the bound
        _check_samples(
            frames * channels,
            what,
            f"decoding the {frames:,} frames of {channels} channel(s) its header declares",
            "if the file is damaged, re-encode it; if it is that long, cut it into shorter files",
        )
        _check_samples(resampled_length(frames, rate, to_rate), what, f"resampling from {rate} to {to_rate} Hz")
        announce(resampled_length(frames, rate, to_rate))
    try:
        data, rate = _read(source)
    except errors as exc:
        raise _not_audio(what, exc) from exc
    return data.T, int(rate)


def load_audio(
    inputs: Any, sampling_rate: int, check_length: Callable[[int], None] | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """``(1-D float audio at sampling_rate, extra keys of a dict input)``; see the module docstring.

    ``check_length(samples)`` is called with the length the audio will have at ``sampling_rate`` before it is
    decoded or resampled, so a caller's own limit refuses it before the memory is spent."""
    extra: dict[str, Any] = {}
    what = "the audio input"
    sampling_rate = check_sampling_rate(sampling_rate, "the feature extractor's sampling_rate")

    def announce(samples: int) -> None:
        if check_length is not None:
            check_length(samples)

    if isinstance(inputs, (str, os.PathLike)):
        path = os.fspath(inputs)
        if path.startswith(("http://", "https://")):
            raise AudioInputError(f"{path}: URLs are not fetched; download the file and pass its path")
        if not os.path.isfile(path):
            what = "is a folder, not a file" if os.path.isdir(path) else "does not exist"
            raise FileMissingError(f"audio file {path} {what}; pass the path of a WAV/FLAC/OGG file")
        what = f"audio file {path}"
        data, rate = _decode(path, what, sampling_rate, announce)
        inputs = resample(to_mono(data, what), rate, sampling_rate, what)
    elif isinstance(inputs, (bytes, bytearray)):
        what = f"the audio bytes ({len(inputs)} bytes)"
        data, rate = _decode(bytes(inputs), what, sampling_rate, announce)
        inputs = resample(to_mono(data, what), rate, sampling_rate, what)
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
        rate = check_sampling_rate(inputs.pop("sampling_rate"), "the audio dict's 'sampling_rate'")
        extra = inputs
        array = to_mono(_as_numpy(array, what), what)
        announce(resampled_length(array.shape[0], rate, sampling_rate))
        inputs = resample(array, rate, sampling_rate, what, "the audio dict's 'sampling_rate'")
    else:
        inputs = to_mono(_as_numpy(inputs, what), what)
        announce(inputs.shape[0])
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

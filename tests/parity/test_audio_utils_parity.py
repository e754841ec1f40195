"""microformers-audio's audio_utils against the reference's ``transformers.audio_utils``: same numbers."""

from __future__ import annotations

import numpy as np
import pytest

from microformers_audio import audio_utils as ours
from microformers_sdk.testing import assert_close

pytest.importorskip("transformers")
theirs = pytest.importorskip("transformers.audio_utils")


def _same(got: object, want: object) -> None:
    got_array, want_array = np.asarray(got), np.asarray(want)
    assert got_array.shape == want_array.shape
    assert got_array.dtype == want_array.dtype, (got_array.dtype, want_array.dtype)
    if got_array.dtype.kind != "f":
        np.testing.assert_array_equal(got_array, want_array)
        return
    # two implementations of the same formulas: a few ulps apart, relative to the values; a tiny absolute
    # floor where they are near zero (cos(pi/2) is 6e-17, not 0), where a relative tolerance alone demands bits
    double = got_array.dtype == np.float64
    assert_close(got_array, want_array, rtol=1e-12 if double else 1e-6, atol=1e-15 if double else 1e-9)


@pytest.mark.parametrize("scale", ["htk", "kaldi", "slaney"])
def test_mel_scales(scale: str) -> None:
    freqs = np.array([0.0, 60.0, 440.0, 999.9, 1000.0, 4000.0, 8000.0])
    _same(ours.hertz_to_mel(np.copy(freqs), scale), theirs.hertz_to_mel(np.copy(freqs), scale))
    for value in (440.0, 2500.0):
        _same(ours.hertz_to_mel(value, scale), theirs.hertz_to_mel(value, scale))
    mels = theirs.hertz_to_mel(np.copy(freqs), scale)
    _same(ours.mel_to_hertz(np.copy(mels), scale), theirs.mel_to_hertz(np.copy(mels), scale))
    for value in (12.0, 30.0):
        _same(ours.mel_to_hertz(value, scale), theirs.mel_to_hertz(value, scale))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_frequency_bins": 201, "num_mel_filters": 80, "min_frequency": 0.0, "max_frequency": 8000.0},
        {"num_frequency_bins": 257, "num_mel_filters": 40, "min_frequency": 20.0, "max_frequency": 7600.0,
         "norm": "slaney", "mel_scale": "slaney"},
        {"num_frequency_bins": 257, "num_mel_filters": 23, "min_frequency": 20.0, "max_frequency": 8000.0,
         "mel_scale": "kaldi", "triangularize_in_mel_space": True},
        {"num_frequency_bins": 201, "num_mel_filters": 64, "min_frequency": 50.0, "max_frequency": 8000.0,
         "norm": "slaney", "mel_scale": "slaney", "dtype": np.float32},
    ],
)  # fmt: skip
def test_mel_filter_bank(kwargs: dict) -> None:
    _same(ours.mel_filter_bank(sampling_rate=16000, **kwargs), theirs.mel_filter_bank(sampling_rate=16000, **kwargs))


def test_windows_and_fft_length() -> None:
    for name in ("boxcar", "hamming", "hann", "povey", "hann_window"):
        for periodic in (True, False):
            _same(ours.window_function(400, name, periodic), theirs.window_function(400, name, periodic))
        _same(
            ours.window_function(300, name, frame_length=512, center=False),
            theirs.window_function(300, name, frame_length=512, center=False),
        )
        _same(ours.window_function(301, name, frame_length=512), theirs.window_function(301, name, frame_length=512))
    for length in (1, 2, 255, 256, 257, 400, 1000):
        assert ours.optimal_fft_length(length) == theirs.optimal_fft_length(length)


def _wave(seconds: float = 0.3, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(0).standard_normal(t.shape)
    return (0.6 * np.sin(2 * np.pi * 440 * t) + 0.1 * noise).astype(np.float32)


SPECTROGRAM_CASES = [
    {"power": 1.0},
    {"power": 2.0, "center": False},
    {"power": None, "onesided": False},
    {"power": 2.0, "mel": True, "log_mel": "log10"},
    {"power": 2.0, "mel": True, "log_mel": "dB", "reference": 2.0, "db_range": 60.0},
    {"power": 1.0, "mel": True, "log_mel": "dB", "min_value": 1e-5},
    {"power": 2.0, "mel": True, "log_mel": "log", "preemphasis": 0.97, "remove_dc_offset": True, "pad_mode": "constant",
     "mel_floor": 1.192092955078125e-07},
    {"power": 2.0, "fft_length": 512, "frame_length": 400},
]  # fmt: skip


@pytest.mark.parametrize("case", SPECTROGRAM_CASES)
def test_spectrogram(case: dict) -> None:
    case = dict(case)
    frame_length = case.pop("frame_length", 400)
    fft_length = case.pop("fft_length", None)
    window = theirs.window_function(frame_length, "hann")
    if case.pop("mel", False):
        case["mel_filters"] = theirs.mel_filter_bank((fft_length or frame_length) // 2 + 1, 40, 0.0, 8000.0, 16000)
    args = (_wave(), window, frame_length, 160)
    _same(
        ours.spectrogram(*args, fft_length=fft_length, **case), theirs.spectrogram(*args, fft_length=fft_length, **case)
    )


def test_spectrogram_dither_draws_the_same_noise() -> None:
    window = theirs.window_function(400, "hamming")
    np.random.seed(7)
    want = theirs.spectrogram(_wave(), window, 400, 160, power=2.0, dither=1.0)
    np.random.seed(7)
    _same(ours.spectrogram(_wave(), window, 400, 160, power=2.0, dither=1.0), want)


def test_decibels() -> None:
    values = np.abs(np.random.default_rng(1).standard_normal((20, 30))) ** 3
    for kwargs in ({}, {"reference": 0.5}, {"db_range": 40.0}, {"min_value": 1e-3, "reference": 3.0}):
        _same(ours.power_to_db(values, **kwargs), theirs.power_to_db(values, **kwargs))
        _same(ours.amplitude_to_db(values, **kwargs), theirs.amplitude_to_db(values, **kwargs))

"""Audio sizes are bounded before they are allocated (issue 42): declared rates and lengths — a file's header, a
dict's ``sampling_rate``, a feature extractor's settings — are checked against sane bounds and the pipeline's own
limits before anything is decoded, resampled or padded; odd shapes are refused, not iterated."""

from __future__ import annotations

import io
import json
import string
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

import microformers
from microformers.errors import ConfigError
from microformers_audio import (
    MAX_SAMPLING_RATE,
    AudioInputError,
    Wav2Vec2CTCTokenizer,
    Wav2Vec2FeatureExtractor,
    Wav2Vec2Processor,
    load_audio,
)

RATE = 16000
# Far below any of the hostile sizes (GiB to hundreds of GiB): a refusal that allocated first would exceed it.
ALLOCATION_CEILING = 64 * 2**20


@pytest.fixture
def bounded_allocations() -> Iterator[Callable[[], int]]:
    """Traces Python and numpy allocations (numpy reports its buffers to tracemalloc); yields the peak so far."""
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def wav_bytes(samples: int, rate: int) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(samples, np.int16), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def flac_declaring(frames: int) -> bytes:
    """A valid FLAC stream whose STREAMINFO says it holds ``frames`` samples (the 36-bit total-samples field)."""
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(1000, np.int16), RATE, format="FLAC")
    data = bytearray(buffer.getvalue())
    # "fLaC", the 4-byte block header, then min/max block size (2+2) and min/max frame size (3+3): 18 bytes in;
    # the next 64 bits are rate (20), channels-1 (3), bits-1 (5) and total samples (36)
    field = int.from_bytes(data[18:26], "big")
    field = (field & ~((1 << 36) - 1)) | frames
    data[18:26] = field.to_bytes(8, "big")
    return bytes(data)


def test_low_rate_wav_is_refused_before_resampling(tmp_path: Path, bounded_allocations: Callable[[], int]) -> None:
    data = wav_bytes(200_000, rate=1)  # 400 KB at 1 Hz: 3.2e9 samples (12.8 GB) at 16 kHz
    with pytest.raises(AudioInputError, match=r"audio bytes \(400044 bytes\): resampling from 1 to 16000 Hz"):
        load_audio(data, RATE)
    (tmp_path / "slow.wav").write_bytes(data)
    with pytest.raises(AudioInputError, match="slow.wav: resampling from 1 to 16000 Hz gives 3,200,000,000"):
        load_audio(tmp_path / "slow.wav", RATE)
    assert bounded_allocations() < ALLOCATION_CEILING


def test_flac_header_declaring_huge_length_is_refused_before_decoding(
    tmp_path: Path, bounded_allocations: Callable[[], int]
) -> None:
    (tmp_path / "huge.flac").write_bytes(flac_declaring(2**36 - 1))
    assert soundfile.info(str(tmp_path / "huge.flac")).frames == 2**36 - 1  # the header really declares it
    with pytest.raises(AudioInputError, match="huge.flac: decoding the 68,719,476,735 frames .* header declares"):
        load_audio(tmp_path / "huge.flac", RATE)
    assert bounded_allocations() < ALLOCATION_CEILING


def test_honest_short_flac_still_loads(tmp_path: Path) -> None:
    (tmp_path / "short.flac").write_bytes(flac_declaring(1000))
    audio, _ = load_audio(tmp_path / "short.flac", RATE)
    assert audio.shape == (1000,)


@pytest.mark.parametrize("rate", [2**62, MAX_SAMPLING_RATE + 1, 0, -16000, 16000.0, True, "16000", None])
def test_dict_sampling_rate_out_of_bounds_is_refused_naming_it(rate: Any) -> None:
    with pytest.raises(AudioInputError, match="the audio dict's 'sampling_rate'=.* must be a positive integer"):
        load_audio({"array": np.zeros(100, np.float32), "sampling_rate": rate}, RATE)


def test_highest_allowed_rate_resamples() -> None:
    audio, _ = load_audio(
        {"array": np.zeros(MAX_SAMPLING_RATE // 100, np.float32), "sampling_rate": MAX_SAMPLING_RATE}, RATE
    )
    assert abs(audio.shape[0] - RATE // 100) <= 1


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("sampling_rate", 2**62),
        ("sampling_rate", 0),
        ("feature_size", 10**9),
        ("feature_size", "80"),
        ("n_fft", 10**9),
        ("hop_length", 0),
        ("chunk_length", 10**9),
        ("chunk_length", 30.5),
        ("dither", "0.5"),
    ],
)
def test_whisper_feature_extractor_settings_are_bounded_before_use(
    tmp_path: Path, setting: str, value: Any, bounded_allocations: Callable[[], int]
) -> None:
    from microformers_whisper import WhisperFeatureExtractor

    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", setting: value})
    )
    with pytest.raises(ConfigError, match=f"WhisperFeatureExtractor: {setting}=") as info:
        WhisperFeatureExtractor.from_pretrained(tmp_path)
    assert bounded_allocations() < ALLOCATION_CEILING
    if setting != "dither":  # the sizes name the file they were read from
        assert f"({tmp_path / 'preprocessor_config.json'})" in str(info.value)


def test_whisper_max_length_is_bounded_before_padding(bounded_allocations: Callable[[], int]) -> None:
    from microformers_whisper import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor()
    with pytest.raises(ConfigError, match="max_length=1000000000000 .* must be an integer"):
        extractor(np.zeros(1600, np.float32), sampling_rate=RATE, max_length=10**12)
    with pytest.raises(ConfigError, match="pad_to_multiple_of=-5"):
        extractor(np.zeros(1600, np.float32), sampling_rate=RATE, pad_to_multiple_of=-5)
    assert bounded_allocations() < ALLOCATION_CEILING


@pytest.mark.parametrize(("setting", "value"), [("sampling_rate", 2**62), ("feature_size", -1)])
def test_wav2vec2_feature_extractor_settings_are_bounded(setting: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"Wav2Vec2FeatureExtractor: {setting}="):
        Wav2Vec2FeatureExtractor(**{setting: value})


@pytest.mark.parametrize(("setting", "value"), [("sampling_rate", 2**62), ("feature_size", -1)])
def test_a_bad_setting_names_the_file_it_was_read_from_or_the_keyword(tmp_path: Path, setting: str, value: Any) -> None:
    file = tmp_path / "preprocessor_config.json"
    file.write_text(json.dumps({"feature_extractor_type": "Wav2Vec2FeatureExtractor", setting: value}))
    with pytest.raises(ConfigError, match=f"^Wav2Vec2FeatureExtractor: {setting}=.*") as info:
        Wav2Vec2FeatureExtractor.from_pretrained(tmp_path)
    assert f"({file})" in str(info.value) and "keyword" not in str(info.value)
    with pytest.raises(ConfigError, match=r"\(keyword argument\)"):  # the file is fine; the keyword is not
        Wav2Vec2FeatureExtractor.from_pretrained(_folder_with(tmp_path / "good", {}), **{setting: value})
    with pytest.raises(ConfigError, match=r"\(argument\)"):
        Wav2Vec2FeatureExtractor(**{setting: value})
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "processor_config.json").write_text(json.dumps({"feature_extractor": {setting: value}}))
    with pytest.raises(ConfigError) as info:
        Wav2Vec2FeatureExtractor.from_pretrained(nested)
    assert f"({nested / 'processor_config.json'} ('feature_extractor'))" in str(info.value)


def _folder_with(folder: Path, settings: dict[str, Any]) -> Path:
    folder.mkdir()
    (folder / "preprocessor_config.json").write_text(json.dumps(settings))
    return folder


@pytest.fixture(scope="module")
def asr(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from microformers_sdk.testing import checks
    from microformers_wav2vec2 import Wav2Vec2Config, Wav2Vec2ForCTC

    folder = tmp_path_factory.mktemp("asr")
    vocab = {
        "<pad>": 0,
        "<s>": 1,
        "</s>": 2,
        "<unk>": 3,
        "|": 4,
        **{c: i + 5 for i, c in enumerate(string.ascii_uppercase)},
    }
    (folder / "vocab.json").write_text(json.dumps(vocab))
    processor = Wav2Vec2Processor(
        feature_extractor=Wav2Vec2FeatureExtractor(return_attention_mask=True),
        tokenizer=Wav2Vec2CTCTokenizer(folder / "vocab.json"),
    )
    config = Wav2Vec2Config(
        vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
        conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2, feat_extract_norm="layer", do_stable_layer_norm=True,
    )  # fmt: skip
    checks.build_model(Wav2Vec2ForCTC, config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return microformers.pipeline("automatic-speech-recognition", model=folder)


@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 1, 1600), (2, 3, 4, 5)])
def test_asr_pipeline_refuses_arrays_of_three_or_more_dimensions(asr: Any, shape: tuple[int, ...]) -> None:
    with pytest.raises(AudioInputError, match=r"has shape \(.*\); pass mono audio"):
        asr(np.zeros(shape, np.float32))  # not a generator of per-row results


def test_asr_pipeline_length_limit_applies_before_decoding(
    asr: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from microformers_audio import audio_io, pipelines

    (tmp_path / "long.wav").write_bytes(wav_bytes(2 * RATE, RATE))
    monkeypatch.setattr(pipelines, "available_memory", lambda: 4_000_000)  # 2 s of attention do not fit
    decoded: list[object] = []
    monkeypatch.setattr(audio_io, "_read", lambda *args: decoded.append(args) or (np.zeros((1, 1)), RATE))
    with pytest.raises(AudioInputError, match="chunk_length_s=30"):
        asr(str(tmp_path / "long.wav"))
    assert decoded == []  # refused from the header alone


def test_asr_pipeline_refuses_low_rate_file(asr: Any) -> None:
    with pytest.raises(AudioInputError, match="resampling from 1 to 16000 Hz"):
        asr(wav_bytes(200_000, rate=1))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("hello", r"^the audio must be a waveform .* got str of dtype <U5$"),
        (["a", "b"], r"^the audio must be a waveform .* got list of dtype <U1$"),
        (np.zeros(100, np.complex64), r"^the audio must be a waveform .* dtype complex64$"),
        (np.array([None] * 10), r"^the audio must be a waveform .* dtype object$"),
        (np.full(100, np.nan, np.float32), r"^the audio holds NaN or infinite samples"),
        ([np.zeros(10, np.float32), np.array([0.0, np.inf])], r"^row 1 of the batch holds NaN or infinite samples"),
    ],
)
def test_wav2vec2_refuses_what_is_not_a_finite_waveform(raw: Any, message: str) -> None:
    with pytest.raises(AudioInputError, match=message):
        Wav2Vec2FeatureExtractor()(raw, sampling_rate=RATE)


def test_wav2vec2_call_sizes_and_rate_are_checked_before_padding(bounded_allocations: Callable[[], int]) -> None:
    extractor = Wav2Vec2FeatureExtractor()
    wave = np.zeros(100, np.float32)
    with pytest.raises(ConfigError, match=r"max_length=1000000000000 \(argument\) must be an integer from 1 to "):
        extractor(wave, sampling_rate=RATE, padding="max_length", max_length=10**12)
    with pytest.raises(ConfigError, match=r"pad_to_multiple_of=0 \(argument\)"):
        extractor(wave, sampling_rate=RATE, padding=True, pad_to_multiple_of=0)
    assert bounded_allocations() < ALLOCATION_CEILING
    # a rate of the wrong type is named as such (it was "sampled at 16000 Hz but ... expects 16000 Hz")
    with pytest.raises(AudioInputError, match=r"^sampling_rate='16000' must be a positive integer"):
        extractor(wave, sampling_rate="16000")
    assert extractor(wave, sampling_rate=RATE, padding="max_length", max_length=128)["input_values"][0].shape == (128,)


def test_an_audio_path_that_is_a_folder_is_named_as_a_folder(tmp_path: Path) -> None:
    with pytest.raises(microformers.FileMissingError, match=r"is a folder, not a file; pass the path of a WAV"):
        load_audio(str(tmp_path), RATE)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"chunk_length_s": float("nan")}, r"^chunk_length_s=nan: pass a positive number of seconds$"),  # ValueError
        ({"chunk_length_s": 1, "stride_length_s": -1}, r"^stride_length_s=-1: pass a number of seconds >= 0"),
        ({"chunk_length_s": 1, "stride_length_s": (0.1, float("inf"))}, r"^stride_length_s=\(0\.1, inf\): pass"),
        (
            {"chunk_length_s": 1, "stride_length_s": (0.1,)},
            r"^stride_length_s=\(0\.1,\): pass .* a \(left, right\) pair",
        ),
    ],
)
def test_asr_pipeline_durations_must_be_finite_and_not_negative(asr: Any, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):  # a negative stride was accepted
        asr(np.zeros(RATE, np.float32), **kwargs)


@pytest.mark.parametrize("stride", [(-1, -1), (0.5, 0), "ab", (1, 2, 3)])
def test_asr_pipeline_refuses_a_dict_stride_that_is_no_sample_counts(asr: Any, stride: Any) -> None:
    with pytest.raises(AudioInputError, match=r"^the audio dict's 'stride'=.* must be \(left, right\) sample counts"):
        asr({"raw": np.zeros(RATE, np.float32), "sampling_rate": RATE, "stride": stride})

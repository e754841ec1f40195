"""The feature extractor, tokenizer and processor without the reference: shapes, files, bad input."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from tiny_whisper import build_tokenizer

from microformers import AutoFeatureExtractor, AutoProcessor, AutoTokenizer, ConfigError
from microformers_audio import AudioInputError
from microformers_whisper import WhisperFeatureExtractor, WhisperProcessor


def test_features_are_30_s_windows_of_log_mels() -> None:
    extractor = WhisperFeatureExtractor(feature_size=80)
    audio = np.sin(np.linspace(0, 2000, 16000 * 2)).astype(np.float32)
    features = extractor([audio, audio[:8000]], sampling_rate=16000, return_attention_mask=True, return_tensors="np")
    assert features["input_features"].shape == (2, 80, 3000)
    assert features["attention_mask"].shape == (2, 3000)
    assert features["attention_mask"][1].sum() == 50
    assert WhisperFeatureExtractor(feature_size=128)(audio, sampling_rate=16000)["input_features"].shape == (
        1,
        128,
        3000,
    )


@pytest.mark.parametrize(
    ("audio", "message"),
    [
        (np.zeros(0, np.float32), "empty"),
        (np.array([0.1, np.nan, 0.2], np.float32), "NaN"),
        (np.zeros((2, 2, 10), np.float32), "mono"),
    ],
)
def test_bad_audio_is_refused_naming_the_argument(audio: np.ndarray, message: str) -> None:
    with pytest.raises(AudioInputError, match=message):
        WhisperFeatureExtractor()(audio, sampling_rate=16000)


def test_wrong_sampling_rate_says_how_to_resample() -> None:
    with pytest.raises(AudioInputError, match="resample"):
        WhisperFeatureExtractor()(np.zeros(100, np.float32), sampling_rate=8000)


def test_files_and_auto_classes(tmp_path: Path) -> None:
    build_tokenizer(tmp_path / "folder")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "folder", language="en", task="transcribe")
    assert type(tokenizer).__name__ == "WhisperTokenizerFast"
    ids = tokenizer("hello world").input_ids
    assert tokenizer.convert_ids_to_tokens(ids[:4]) == [
        "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"
    ]  # fmt: skip
    assert tokenizer.decode(ids, skip_special_tokens=True) == "hello world"
    processor = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(), tokenizer=tokenizer)
    processor.save_pretrained(tmp_path / "saved")
    again = AutoProcessor.from_pretrained(tmp_path / "saved")
    assert type(again).__name__ == "WhisperProcessor" and again.tokenizer.language == "en"
    assert type(AutoFeatureExtractor.from_pretrained(tmp_path / "saved")).__name__ == "WhisperFeatureExtractor"
    both = again(audio=np.zeros(1600, np.float32), text="hello", sampling_rate=16000)
    assert both["input_features"].shape == (1, 80, 3000) and both["labels"][-1] == tokenizer.eos_token_id


def test_unknown_language_and_task_are_clear_errors(tmp_path: Path) -> None:
    from microformers.errors import InputError

    build_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    with pytest.raises(InputError, match="klingon"):
        tokenizer.set_prefix_tokens(language="klingon")
    tokenizer.language = None
    with pytest.raises(InputError, match="task="):
        tokenizer.set_prefix_tokens(task="summarize")


def test_decode_asr_builds_segment_and_word_chunks(tmp_path: Path) -> None:
    ids = build_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    begin = ids["<|0.00|>"]

    def words(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False).input_ids

    first, second = words(" hello world,"), words(" the (lazy) dog")
    tokens = [begin, *first, begin + 50, begin + 50, *second, begin + 100, *words(" fox")]
    segments = tokenizer.decode_asr([{"tokens": tokens}], return_timestamps=True)
    assert segments["text"] == " hello world, the (lazy) dog fox"
    assert segments["chunks"] == [
        {"text": " hello world,", "timestamp": (0.0, 1.0)},
        {"text": " the (lazy) dog", "timestamp": (1.0, 2.0)},
        {"text": " fox", "timestamp": (None, None)},  # after the last pair, no timestamp of its own
    ]
    # one time per token: text token i spans (time of token i - 1, time of token i)
    times = [0.1 * index for index in range(len(tokens))]
    found = tokenizer.decode_asr([{"tokens": tokens, "token_timestamps": times}], return_timestamps="word")
    assert [word["text"] for word in found["chunks"]] == [" hello", " world,", " the", " (lazy)", " dog", " fox"]
    spans = [word["timestamp"] for word in found["chunks"]]
    assert spans[0][0] == 0.0 and all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(spans))
    assert spans[-1][1] == round(times[-1], 2)
    english = tokenizer.decode_asr([{"tokens": [ids["<|en|>"], *first]}], return_language=True)
    assert english["chunks"] == [{"text": " hello world,", "language": "english"}]


def test_a_bad_dither_names_the_file_it_came_from(tmp_path: Path) -> None:
    WhisperFeatureExtractor().save_pretrained(tmp_path)
    path = tmp_path / "preprocessor_config.json"
    path.write_text(path.read_text().replace('"dither": 0.0', '"dither": "loud"'))
    with pytest.raises(ConfigError, match=r"dither='loud' \(.*preprocessor_config\.json\) must be a finite number"):
        AutoFeatureExtractor.from_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"dither=nan \(keyword argument\)"):
        AutoFeatureExtractor.from_pretrained(tmp_path, dither=float("nan"))
    with pytest.raises(ConfigError, match=r"dither=True \(argument\)"):
        WhisperFeatureExtractor(dither=True)

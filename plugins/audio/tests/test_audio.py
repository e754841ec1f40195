"""microformers-audio without the reference: processing base classes, Wav2Vec2 processor family, audio
inputs, the CTC collator and the speech pipelines on a tiny random model (parity is in tests/parity)."""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

import microformers
from microformers.errors import ConfigError, FileMissingError, InputError
from microformers_audio import (
    AudioInputError,
    DataCollatorCTCWithPadding,
    Wav2Vec2CTCTokenizer,
    Wav2Vec2FeatureExtractor,
    Wav2Vec2Processor,
    load_audio,
)
from microformers_sdk.processing import BatchFeature
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)

RATE = 16000
VOCAB = {
    "<pad>": 0,
    "<s>": 1,
    "</s>": 2,
    "<unk>": 3,
    "|": 4,
    **{c: i + 5 for i, c in enumerate(string.ascii_uppercase)},
}


def wave(seconds: float, freq: float = 440.0, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.fixture
def processor(tmp_path: Path) -> Wav2Vec2Processor:
    (tmp_path / "vocab.json").write_text(json.dumps(VOCAB))
    tokenizer = Wav2Vec2CTCTokenizer(tmp_path / "vocab.json")
    return Wav2Vec2Processor(
        feature_extractor=Wav2Vec2FeatureExtractor(return_attention_mask=True), tokenizer=tokenizer
    )


# -- BatchFeature and the feature extractor ----------------------------------------------------------
def test_batch_feature_to_and_convert() -> None:
    batch = BatchFeature({"input_values": [np.ones(3), np.zeros(3)], "attention_mask": [[1, 1, 1], [1, 1, 0]]}, "pt")
    assert batch.input_values.shape == (2, 3) and batch["attention_mask"].dtype == torch.int64
    batch.to(torch.float16)
    assert batch.input_values.dtype == torch.float16 and batch.attention_mask.dtype == torch.int64
    assert batch.to("cpu") is batch
    with pytest.raises(InputError, match="padding=True"):
        BatchFeature({"input_values": [np.ones(3), np.ones(2)]}, "pt")
    with pytest.raises(InputError, match="return_tensors='tf'"):
        BatchFeature({"x": [1]}, "tf")
    with pytest.raises(AttributeError, match="no key 'missing'"):
        _ = batch.missing


def test_feature_extractor_normalises_pads_and_validates() -> None:
    fe = Wav2Vec2FeatureExtractor(return_attention_mask=True)
    out = fe([wave(0.1) * 4 + 1, wave(0.05)], sampling_rate=RATE, padding=True, return_tensors="pt")
    values, mask = out["input_values"], out["attention_mask"]
    assert values.shape == (2, 1600) and mask[1].sum() == 800 and values.dtype == torch.float32
    real = values[0]
    assert abs(float(real.mean())) < 1e-5 and abs(float(real.std(unbiased=False)) - 1) < 1e-3
    assert bool((values[1, 800:] == 0).all())
    with pytest.raises(AudioInputError, match="8000 Hz but this feature extractor"):
        fe(wave(0.1), sampling_rate=8000)
    with pytest.raises(AudioInputError, match="mono"):
        fe(np.zeros((2, 2, 100)), sampling_rate=RATE)
    with pytest.raises(AudioInputError, match="empty"):
        fe(np.zeros(0, dtype=np.float32), sampling_rate=RATE)
    with pytest.raises(InputError, match="max_length"):
        fe(wave(0.1), sampling_rate=RATE, padding="max_length")


def test_feature_extractor_files_round_trip_unknown_keys(tmp_path: Path) -> None:
    fe = Wav2Vec2FeatureExtractor(do_normalize=False, vendor_setting={"a": 1})
    fe.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert data["feature_extractor_type"] == "Wav2Vec2FeatureExtractor" and data["vendor_setting"] == {"a": 1}
    loaded = microformers.AutoFeatureExtractor.from_pretrained(tmp_path, sampling_rate=8000)
    assert isinstance(loaded, Wav2Vec2FeatureExtractor)
    assert loaded.vendor_setting == {"a": 1} and loaded.do_normalize is False and loaded.sampling_rate == 8000
    with pytest.raises(ConfigError, match="unexpected arguments \\['not_a_setting'\\]"):
        Wav2Vec2FeatureExtractor.from_pretrained(tmp_path, not_a_setting=1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileMissingError, match="empty has no preprocessor_config.json"):
        Wav2Vec2FeatureExtractor.from_pretrained(tmp_path / "empty")


# -- tokenizer and processor -------------------------------------------------------------------------
def test_tokenizer_encode_decode_and_bad_vocab(processor: Wav2Vec2Processor, tmp_path: Path) -> None:
    tokenizer = processor.tokenizer
    ids = tokenizer("AB C<unk> D")["input_ids"]
    assert ids == [5, 6, 4, 7, 3, 8]
    assert tokenizer.decode([0, 5, 5, 0, 5, 4, 4, 6, 0]) == "AA B"
    out = tokenizer.decode([0, 5, 5, 0, 5, 4, 4, 6, 0], output_word_offsets=True)
    assert out.word_offsets == [
        {"word": "AA", "start_offset": 1, "end_offset": 5},
        {"word": "B", "start_offset": 7, "end_offset": 8},
    ]
    assert out.char_offsets is None and "char_offsets" not in out
    assert tokenizer.batch_decode(torch.tensor([[5, 0, 5], [6, 6, 4]])) == ["AA", "B"]
    (tmp_path / "bad.json").write_text(json.dumps({"A": 0, "|": 1}))
    with pytest.raises(ConfigError, match="pad token '<pad>' \\(the CTC blank\\) is not in the vocabulary"):
        Wav2Vec2CTCTokenizer(tmp_path / "bad.json")
    (tmp_path / "nested.json").write_text(json.dumps({"eng": VOCAB, "fra": VOCAB}))
    with pytest.raises(ConfigError, match="target_lang"):
        Wav2Vec2CTCTokenizer(tmp_path / "nested.json")
    assert Wav2Vec2CTCTokenizer(tmp_path / "nested.json", target_lang="fra").encode("A") == [5]


def test_processor_call_save_and_auto_load(processor: Wav2Vec2Processor, tmp_path: Path) -> None:
    both = processor(audio=[wave(0.1), wave(0.2)], text=["AB", "C"], sampling_rate=RATE, padding=True)
    assert set(both) == {"input_values", "attention_mask", "labels"} and both["labels"][1] == [7, 0]
    with pytest.raises(InputError, match="neither the feature extractor nor the tokenizer"):
        processor(audio=wave(0.1), sampling_rate=RATE, bogus=1)
    with pytest.raises(InputError, match="audio=... and/or text="):
        processor()
    processor.save_pretrained(tmp_path / "saved")
    assert {p.name for p in (tmp_path / "saved").iterdir()} == {
        "processor_config.json",
        "vocab.json",
        "tokenizer_config.json",
    }
    loaded = microformers.AutoProcessor.from_pretrained(tmp_path / "saved")
    assert isinstance(loaded, Wav2Vec2Processor)
    assert loaded.feature_extractor.to_dict() == processor.feature_extractor.to_dict()
    assert loaded.tokenizer.get_vocab() == processor.tokenizer.get_vocab()
    assert (
        json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())["processor_class"] == "Wav2Vec2Processor"
    )


def test_ctc_collator_pads_audio_and_labels_separately(processor: Wav2Vec2Processor) -> None:
    features = [
        {"input_values": processor(audio=wave(0.1), sampling_rate=RATE).input_values[0], "labels": [5, 6, 7]},
        {"input_values": processor(audio=wave(0.05), sampling_rate=RATE).input_values[0], "labels": [8]},
    ]
    batch = DataCollatorCTCWithPadding(processor=processor)(features)
    assert batch["input_values"].shape == (2, 1600) and batch["attention_mask"][1].sum() == 800
    assert batch["labels"].tolist() == [[5, 6, 7], [8, -100, -100]]
    with pytest.raises(InputError, match="lack 'input_values' or 'labels'"):
        DataCollatorCTCWithPadding(processor=processor)([{"labels": [1]}])


# -- audio inputs ------------------------------------------------------------------------------------
def test_load_audio_files_bytes_dicts_and_bad_input(tmp_path: Path) -> None:
    stereo = np.stack([wave(0.2, rate=8000), wave(0.2, 880, rate=8000)], axis=1)
    soundfile.write(tmp_path / "stereo.wav", stereo, 8000)
    audio, _ = load_audio(tmp_path / "stereo.wav", RATE)
    assert audio.ndim == 1 and abs(audio.shape[0] - 2 * 1600) <= 2  # 8 kHz resampled to 16 kHz
    from_bytes, _ = load_audio((tmp_path / "stereo.wav").read_bytes(), RATE)
    np.testing.assert_array_equal(from_bytes, audio)
    resampled, extra = load_audio({"array": wave(0.2, rate=8000), "sampling_rate": 8000, "id": 7}, RATE)
    assert resampled.shape[0] == 3200 and extra == {"id": 7}
    averaged, _ = load_audio({"raw": stereo.T, "sampling_rate": RATE}, RATE)  # (channels, samples)
    np.testing.assert_allclose(averaged, stereo.mean(axis=1), atol=1e-7)
    (tmp_path / "notes.wav").write_text("not audio at all")
    with pytest.raises(AudioInputError, match="notes.wav is not an audio file"):
        load_audio(tmp_path / "notes.wav", RATE)
    with pytest.raises(FileMissingError, match="missing.wav does not exist"):
        load_audio(str(tmp_path / "missing.wav"), RATE)
    with pytest.raises(AudioInputError, match="empty"):
        load_audio(np.zeros(0, dtype=np.float32), RATE)
    with pytest.raises(AudioInputError, match="pass array.T"):
        load_audio(stereo, RATE)  # (samples, channels): refused rather than guessed
    with pytest.raises(AudioInputError, match="'sampling_rate'"):
        load_audio({"array": wave(0.1)}, RATE)


# -- pipelines ---------------------------------------------------------------------------------------
@pytest.fixture
def asr_folder(processor: Wav2Vec2Processor, tmp_path: Path) -> Path:
    from microformers_sdk.testing import checks
    from microformers_wav2vec2 import Wav2Vec2Config, Wav2Vec2ForCTC

    config = Wav2Vec2Config(
        vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
        conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2, feat_extract_norm="layer", do_stable_layer_norm=True,
    )  # fmt: skip
    folder = tmp_path / "asr"
    checks.build_model(Wav2Vec2ForCTC, config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def test_asr_pipeline_inputs_agree_and_bad_arguments(asr_folder: Path, tmp_path: Path) -> None:
    asr = microformers.pipeline("automatic-speech-recognition", model=asr_folder)
    audio = wave(0.5) + 0.1 * np.random.default_rng(0).standard_normal(8000).astype(np.float32)
    text = asr(audio)["text"]
    assert text
    soundfile.write(tmp_path / "clip.wav", audio, RATE, subtype="FLOAT")
    # exact: a float WAV, its bytes, a dict and a tensor all give the same samples, run alone the same way
    assert asr(str(tmp_path / "clip.wav"))["text"] == text
    assert asr((tmp_path / "clip.wav").read_bytes())["text"] == text
    assert asr({"array": audio, "sampling_rate": RATE})["text"] == text
    assert asr(torch.from_numpy(audio))["text"] == text
    batched = asr([audio, audio[:4000]], batch_size=2)[0]["text"]
    if batched != text:  # a padded batch is another shape: its argmax may differ only where two logits tie
        features = asr.feature_extractor(audio, sampling_rate=RATE, return_tensors="pt")
        with torch.no_grad():
            top = asr.model(features["input_values"]).logits.topk(2, dim=-1).values
        gap = float((top[..., 0] - top[..., 1]).min())
        assert gap <= 1e-4, f"batched {batched!r} vs alone {text!r}, and no frame is a near tie (gap {gap:.3g})"
    words = asr(audio, return_timestamps="word")["chunks"]
    assert "".join(c["text"] for c in words) == text.replace(" ", "")
    assert all(0 <= c["timestamp"][0] < c["timestamp"][1] <= 0.5 for c in words)
    with pytest.raises(ConfigError, match="'char' or 'word'"):
        asr(audio, return_timestamps=True)
    with pytest.raises(ConfigError, match="does not take max_new_tokens"):
        asr(audio, max_new_tokens=3)
    with pytest.raises(ConfigError, match="return_language=True needs a Whisper model"):
        asr(audio, return_language=True)
    with pytest.raises(ConfigError, match="longer than the two strides"):
        asr(audio, chunk_length_s=0.1, stride_length_s=0.1)


def test_asr_pipeline_refuses_audio_too_long_for_memory(asr_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from microformers_audio import pipelines

    asr = microformers.pipeline("automatic-speech-recognition", model=asr_folder)
    monkeypatch.setattr(pipelines, "available_memory", lambda: 4_000_000)
    with pytest.raises(AudioInputError, match="chunk_length_s=30"):
        asr(wave(2.0))
    assert asr(wave(2.0), chunk_length_s=0.25)["text"] is not None  # windows fit
    with pytest.raises(AudioInputError, match="a smaller chunk_length_s"):
        asr(wave(2.0), chunk_length_s=1.0)

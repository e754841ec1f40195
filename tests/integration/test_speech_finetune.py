"""The ASR guide's fine-tuning flow end to end: processor -> CTC collator -> Trainer -> pipeline.

A synthetic "language": each letter is a tone of its own pitch (80 ms), words are separated by
silence. A tiny ``Wav2Vec2ForCTC`` is fine-tuned on a handful of such utterances with the
``microformers-trainer`` Trainer until its CTC loss falls well below where it started, saved with its
processor, and the ``automatic-speech-recognition`` pipeline then transcribes the training utterances.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import microformers
from microformers_audio import (
    DataCollatorCTCWithPadding,
    Wav2Vec2CTCTokenizer,
    Wav2Vec2FeatureExtractor,
    Wav2Vec2Processor,
)
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from microformers_wav2vec2 import Wav2Vec2Config, Wav2Vec2ForCTC

RATE = 16000
LETTERS = "ABCD"
PITCH = {"A": 300.0, "B": 600.0, "C": 1200.0, "D": 2400.0}
TEXTS = ["AB", "CD", "BAD", "CAB", "DAD", "AC", "DB CA", "BAD CAB"]


def speak(text: str, seed: int) -> np.ndarray:
    """80 ms per letter, 40 ms of silence between letters and 120 ms between words, a little noise."""
    rng = np.random.default_rng(seed)
    pieces = [np.zeros(640)]
    t = np.arange(1280) / RATE
    for char in text:
        if char == " ":
            pieces.append(np.zeros(1920))
            continue
        pieces.append(0.5 * np.sin(2 * np.pi * PITCH[char] * t))
        pieces.append(np.zeros(640))
    audio = np.concatenate(pieces)
    return (audio + 0.01 * rng.standard_normal(audio.shape)).astype(np.float32)


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory) -> Wav2Vec2Processor:
    folder = tmp_path_factory.mktemp("vocab")
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, **{c: i + 3 for i, c in enumerate(LETTERS)}}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = Wav2Vec2CTCTokenizer(folder / "vocab.json", bos_token=None, eos_token=None)
    feature_extractor = Wav2Vec2FeatureExtractor(return_attention_mask=True)
    return Wav2Vec2Processor(feature_extractor=feature_extractor, tokenizer=tokenizer)


def test_finetune_tiny_wav2vec2_with_trainer_then_transcribe(processor: Wav2Vec2Processor, tmp_path: Path) -> None:
    dataset = []
    for index, text in enumerate(TEXTS):
        audio = speak(text, seed=index)
        dataset.append(
            {
                "input_values": processor(audio=audio, sampling_rate=RATE).input_values[0],
                "labels": processor(text=text).input_ids,
            }
        )
    config = Wav2Vec2Config(
        vocab_size=len(processor.tokenizer), pad_token_id=processor.tokenizer.pad_token_id, hidden_size=32,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, conv_dim=(32, 32, 32),
        conv_stride=(5, 4, 4), conv_kernel=(10, 4, 4), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer", do_stable_layer_norm=True, mask_time_prob=0.0, layerdrop=0.0,
        hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, final_dropout=0.0,
        ctc_loss_reduction="mean",
    )  # fmt: skip
    torch.manual_seed(0)
    model = Wav2Vec2ForCTC(config)
    args = microformers.TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, learning_rate=3e-3, max_steps=220,
        lr_scheduler_type="constant", logging_steps=10, save_strategy="no", report_to="none", remove_unused_columns=False,
        seed=0, disable_tqdm=True, optim="adamw_torch",
    )  # fmt: skip
    trainer = microformers.Trainer(
        model=model, args=args, train_dataset=dataset, data_collator=DataCollatorCTCWithPadding(processor=processor),
        processing_class=processor,
    )  # fmt: skip
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) >= 10
    assert losses[-1] < 0.05 * losses[0], f"CTC loss did not fall well below its start: {losses}"

    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    asr = microformers.pipeline("automatic-speech-recognition", model=str(tmp_path / "model"))
    heard = [asr(speak(text, seed=index))["text"] for index, text in enumerate(TEXTS)]
    correct = sum(h == t for h, t in zip(heard, TEXTS))
    assert correct >= len(TEXTS) - 1, f"transcriptions {heard} vs {TEXTS}"
    words = asr(speak("BAD CAB", seed=7), return_timestamps="word")["chunks"]
    assert [word["text"] for word in words] == ["BAD", "CAB"], words
    assert 0.0 <= words[0]["timestamp"][0] < words[0]["timestamp"][1] < words[1]["timestamp"][0] <= 1.5
    # Windows of 0.5 s (less than half the utterance) still give every letter in order.
    chunked = asr(speak("BAD CAB", seed=7), chunk_length_s=0.5, stride_length_s=0.1)
    assert chunked["text"].replace(" ", "") == "BADCAB", chunked

"""The speech seq2seq fine-tuning flow end to end: Whisper processor -> speech seq2seq collator -> Seq2SeqTrainer ->
automatic-speech-recognition pipeline.

A synthetic language: each word is a tone of its own pitch (250 ms, 100 ms of silence between words). A tiny random
Whisper (3 s windows, 16 mel bins) is fine-tuned with ``microformers-trainer``'s ``Seq2SeqTrainer`` until its loss
falls well below where it started; saved with its processor, the pipeline then transcribes the training utterances.

The collator is the one the fine-tuning guides define themselves (the reference library ships none for speech
seq2seq): log-mel features are already of one length (the feature extractor pads every clip to its window), labels
are padded with -100 where there is no token, and the ``<|startoftranscript|>`` every label starts with is dropped
because the model puts it back in front when it shifts the labels into decoder inputs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

import microformers
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from microformers_whisper import (
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizer,
)

RATE = 16000
PITCH = {"the": 300.0, "dog": 600.0, "hello": 900.0, "world": 1300.0, "fox": 1900.0, "lazy": 2600.0}
TEXTS = ["the dog", "hello world", "the fox", "hello dog", "lazy fox", "the world"]


def speak(text: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(4000) / RATE
    pieces = [np.zeros(1600)]
    for word in text.split():
        pieces += [0.5 * np.sin(2 * np.pi * PITCH[word] * t), np.zeros(1600)]
    audio = np.concatenate(pieces)
    return (audio + 0.01 * rng.standard_normal(audio.shape)).astype(np.float32)


class SpeechSeq2SeqCollator:
    """Features stacked (one length already); labels padded with -100, their leading start token dropped."""

    def __init__(self, processor: WhisperProcessor, decoder_start_token_id: int) -> None:
        self.processor = processor
        self.decoder_start_token_id = decoder_start_token_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        features = torch.stack([torch.as_tensor(row["input_features"]) for row in rows])
        padded = self.processor.tokenizer.pad({"input_ids": [row["labels"] for row in rows]}, return_tensors="pt")
        labels = padded["input_ids"].masked_fill(padded["attention_mask"] == 0, -100)
        if bool((labels[:, 0] == self.decoder_start_token_id).all()):
            labels = labels[:, 1:]
        return {"input_features": features, "labels": labels}


def test_finetune_tiny_whisper_with_seq2seq_trainer_then_transcribe(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "whisper" / "tests"))
    from tiny_whisper import build_tokenizer

    ids = build_tokenizer(tmp_path / "tokenizer")
    tokenizer = WhisperTokenizer.from_pretrained(tmp_path / "tokenizer")
    processor = WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=16, chunk_length=3), tokenizer=tokenizer
    )
    start, end = ids["<|startoftranscript|>"], ids["<|endoftext|>"]
    dataset = [
        {
            "input_features": processor.feature_extractor(speak(text, seed), sampling_rate=RATE).input_features[0],
            "labels": tokenizer(text).input_ids,
        }
        for seed in range(2)
        for text in TEXTS
    ]
    assert dataset[0]["labels"][:2] == [start, ids["<|notimestamps|>"]] and dataset[0]["labels"][-1] == end
    config = WhisperConfig(
        vocab_size=len(tokenizer), num_mel_bins=16, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=150, max_target_positions=24, pad_token_id=end, bos_token_id=end, eos_token_id=end,
        decoder_start_token_id=start, begin_suppress_tokens=None, suppress_tokens=None, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config.no_timestamps_token_id = ids["<|notimestamps|>"]
    model.generation_config.max_length = 16
    model.generation_config.num_beams = 1
    args = microformers.Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=6, learning_rate=3e-3, max_steps=120,
        lr_scheduler_type="constant", logging_steps=10, save_strategy="no", report_to="none", seed=0,
        disable_tqdm=True, optim="adamw_torch", remove_unused_columns=False,
    )  # fmt: skip
    trainer = microformers.Seq2SeqTrainer(
        model=model, args=args, train_dataset=dataset, data_collator=SpeechSeq2SeqCollator(processor, start),
        processing_class=processor,
    )  # fmt: skip
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) >= 10
    assert losses[-1] < 0.05 * losses[0], f"the loss did not fall well below its start: {losses}"

    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    asr = microformers.pipeline("automatic-speech-recognition", model=str(tmp_path / "model"))
    heard = [asr(speak(text, seed=5))["text"].strip() for text in TEXTS]
    correct = sum(h == t for h, t in zip(heard, TEXTS))
    assert correct >= len(TEXTS) - 1, f"transcriptions {heard} vs {TEXTS}"

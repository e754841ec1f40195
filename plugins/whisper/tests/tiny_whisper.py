"""A tiny Whisper tokenizer folder built with the ``tokenizers`` library (byte-level BPE + Whisper's tokens)."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from microformers_whisper.languages import LANGUAGES

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, this is a tiny whisper tokenizer",
    "speech recognition turns audio into text",
    "Bonjour le monde! Ça va? Guten Tag, wie geht's?",
    "numbers 1 2 3 and 2026 and punctuation: yes; no.",
]
SPECIALS = [
    "<|endoftext|>", "<|startoftranscript|>", *(f"<|{code}|>" for code in LANGUAGES), "<|translate|>",
    "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>",
]  # fmt: skip
TIMESTAMPS = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]


def build_tokenizer(folder: Path, vocab_size: int = 300) -> dict[str, int]:
    """Write tokenizer.json + tokenizer_config.json into ``folder``; return the ids of the named tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(CORPUS * 20, trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TIMESTAMPS])
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "WhisperTokenizer",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "additional_special_tokens": SPECIALS,
        "model_max_length": 448,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return {t: tokenizer.token_to_id(t) for t in [*SPECIALS, TIMESTAMPS[0], TIMESTAMPS[-1]]}

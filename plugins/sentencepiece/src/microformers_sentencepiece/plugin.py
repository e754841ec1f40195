"""Entry-point module: registers the SentencePiece tokenizer backends and their public class names."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_P = "microformers_sentencepiece"

# backend name -> (class, tokenizer_config.json ``tokenizer_class`` values it serves)
BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "spm-t5": (f"{_P}.fast:T5Tokenizer", ("T5Tokenizer", "T5TokenizerFast")),
    "spm-mbart": (f"{_P}.fast:MBartTokenizer", ("MBartTokenizer", "MBartTokenizerFast")),
    "spm-mbart50": (f"{_P}.fast:MBart50Tokenizer", ("MBart50Tokenizer", "MBart50TokenizerFast")),
    "spm-marian": (f"{_P}.marian:MarianTokenizer", ("MarianTokenizer",)),
    # A folder whose config names no class: the SentencePiece file it holds decides.
    "sentencepiece": (f"{_P}.auto:SentencePieceAuto", ()),
}

EXPORTS: dict[str, str] = {
    "T5Tokenizer": f"{_P}.fast:T5Tokenizer",
    "T5TokenizerFast": f"{_P}.fast:T5TokenizerFast",
    "MBartTokenizer": f"{_P}.fast:MBartTokenizer",
    "MBartTokenizerFast": f"{_P}.fast:MBartTokenizerFast",
    "MBart50Tokenizer": f"{_P}.fast:MBart50Tokenizer",
    "MBart50TokenizerFast": f"{_P}.fast:MBart50TokenizerFast",
    "MarianTokenizer": f"{_P}.marian:MarianTokenizer",
}


@hookimpl
def register_tokenizers(register: Any) -> None:
    for name, (ref, classes) in BACKENDS.items():
        register(name, ref, tokenizer_classes=classes, priority=0)


@hookimpl
def register_exports(register: Any) -> None:
    for name, ref in EXPORTS.items():
        register(name, ref)

"""Entry-point module: registers the ``fast`` tokenizer backend with the kernel."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

# Every ``tokenizer_class`` value of a tokenizer_config.json this backend serves.
TOKENIZER_CLASSES: tuple[str, ...] = (
    "PreTrainedTokenizerFast",
    "TokenizersBackend",
    "BertTokenizer",
    "BertTokenizerFast",
    "DistilBertTokenizer",
    "DistilBertTokenizerFast",
    "GPT2Tokenizer",
    "GPT2TokenizerFast",
    "LlamaTokenizer",
    "LlamaTokenizerFast",
    "Qwen2Tokenizer",
    "Qwen2TokenizerFast",
    "RobertaTokenizer",
    "RobertaTokenizerFast",
)

# Top-level names (``from microformers import BertTokenizer``): the classes with a model's behaviour fixed.
EXPORTS: tuple[str, ...] = (
    "PreTrainedTokenizerFast",
    "BertTokenizer",
    "BertTokenizerFast",
    "DistilBertTokenizer",
    "DistilBertTokenizerFast",
    "GPT2Tokenizer",
    "GPT2TokenizerFast",
    "RobertaTokenizer",
    "RobertaTokenizerFast",
)


@hookimpl
def register_tokenizers(register: Any) -> None:
    register(
        "fast",
        "microformers_tokenizers:PreTrainedTokenizerFast",
        tokenizer_classes=TOKENIZER_CLASSES,
        priority=0,
    )


@hookimpl
def register_exports(register: Any) -> None:
    for name in EXPORTS:
        register(name, f"microformers_tokenizers:{name}")

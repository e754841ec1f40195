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
)


@hookimpl
def register_tokenizers(register: Any) -> None:
    register(
        "fast",
        "microformers_tokenizers:PreTrainedTokenizerFast",
        tokenizer_classes=TOKENIZER_CLASSES,
        priority=0,
    )

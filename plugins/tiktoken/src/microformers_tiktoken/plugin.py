"""Entry-point module: registers the tiktoken tokenizer backend (chosen by ``can_load``)."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_tokenizers(register: Any) -> None:
    # No tokenizer_class of its own: folders are recognised by their tiktoken tokenizer.model.
    register("tiktoken", "microformers_tiktoken.tokenizer:TiktokenTokenizer", tokenizer_classes=(), priority=0)

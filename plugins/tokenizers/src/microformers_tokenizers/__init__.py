"""microformers-tokenizers: the tokenizer backend of microformers.

Importing this package is cheap: the ``tokenizers`` library, ``jinja2`` and ``numpy`` load only when
one of the names below is first used, and ``torch`` only when ``return_tensors="pt"`` asks for it.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "PreTrainedTokenizerFast": "tokenizer",
    "TokenizersBackend": "tokenizer",
    "BatchEncoding": "batch_encoding",
    "ChatTemplateError": "chat_template",
    "render_chat_template": "chat_template",
    "VERY_LARGE_INTEGER": "tokenizer",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'microformers_tokenizers' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

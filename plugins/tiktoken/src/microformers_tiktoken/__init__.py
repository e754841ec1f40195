"""microformers-tiktoken: folders holding a tiktoken ``tokenizer.model`` (GPT-2, Llama 3 ``original/``).

Importing this package is cheap: ``tokenizers`` loads when a tokenizer is first built.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "TiktokenTokenizer": "tokenizer",
    "build_backend": "tokenizer",
    "parse_ranks": "tokenizer",
    "DEFAULT_PATTERN": "tokenizer",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

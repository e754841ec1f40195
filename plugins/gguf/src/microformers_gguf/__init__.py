"""GGUF checkpoints for microformers: weights, config and tokenizer read from one llama.cpp file.

Importing this package is cheap; torch and the ``gguf`` package load when a file is first read.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "GGUF_FORMAT": "format",
    "GGUFFormat": "format",
    "open_gguf": "format",
    "load_state_dict": "format",
    "GGUFFile": "reader",
    "read_gguf": "reader",
}

__all__ = ["__version__", *_LAZY]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

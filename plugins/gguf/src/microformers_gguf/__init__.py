"""GGUF checkpoints for microformers: weights, config and tokenizer read from one llama.cpp file.

Importing this package is cheap; torch and the ``gguf`` package load when a file is first read.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

"""microformers-sentencepiece: T5, mBART / mBART-50 and Marian tokenizers from SentencePiece model files.

Importing this package is cheap: ``sentencepiece`` and ``tokenizers`` load only when a tokenizer class is
first used.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "T5Tokenizer": "fast",
    "T5TokenizerFast": "fast",
    "MBartTokenizer": "fast",
    "MBartTokenizerFast": "fast",
    "MBart50Tokenizer": "fast",
    "MBart50TokenizerFast": "fast",
    "SentencePieceTokenizerFast": "fast",
    "MarianTokenizer": "marian",
    "SpmModel": "spm_model",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

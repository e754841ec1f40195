"""GGUF checkpoints for microformers: weights, config and tokenizer read from one llama.cpp file.

Importing this package is cheap; torch and the ``gguf`` package load when a file is first read.

Public names: reading a file (``open_gguf``, ``read_gguf``, ``GGUFFile``, ``load_state_dict``, the
``GGUF_FORMAT`` checkpoint format) and, for plugins that keep a file's quantized blocks packed
(microformers-quant, which declares this distribution), block-level access: ``TensorPlan`` (Hugging Face
name -> GGUF tensors, row order, ``load``), ``dequantize`` (one tensor's raw bytes -> floats),
``is_supported`` / ``SUPPORTED_TYPES`` (the storage types this plugin reads) and ``PLAIN`` (the
unquantized storage types -> their torch dtype). Other plugins import these names from here, never from
the submodules.
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
    "TensorPlan": "architectures",
    "dequantize": "dequant",
    "is_supported": "dequant",
    "SUPPORTED_TYPES": "dequant",
    "PLAIN": "dequant",
}

__all__ = ["__version__", *_LAZY]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

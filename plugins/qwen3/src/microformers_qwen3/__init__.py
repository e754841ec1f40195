"""microformers-qwen3: Qwen3 dense decoders (``model_type: qwen3``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Qwen3Config": "configuration_qwen3",
    **{
        name: "modeling_qwen3"
        for name in (
            "Qwen3Attention",
            "Qwen3DecoderLayer",
            "Qwen3Model",
            "Qwen3ForCausalLM",
            "Qwen3ForSequenceClassification",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

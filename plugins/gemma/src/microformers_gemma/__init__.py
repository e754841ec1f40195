"""microformers-gemma: Gemma 2 and Gemma 3 text models (``model_type`` gemma2 / gemma3_text) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Gemma2Config": "configuration_gemma2",
    "Gemma3TextConfig": "configuration_gemma3",
    **{
        name: "modeling_gemma2"
        for name in (
            "Gemma2Attention",
            "Gemma2DecoderLayer",
            "Gemma2PreTrainedModel",
            "Gemma2Model",
            "Gemma2ForCausalLM",
            "Gemma2ForSequenceClassification",
        )
    },
    **{
        name: "modeling_gemma3"
        for name in (
            "Gemma3Attention",
            "Gemma3DecoderLayer",
            "Gemma3TextModel",
            "Gemma3ForCausalLM",
            "Gemma3TextForSequenceClassification",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

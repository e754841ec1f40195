"""microformers-starcoder2: StarCoder2 (``model_type: starcoder2``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Starcoder2Config": "configuration_starcoder2",
    **{
        name: "modeling_starcoder2"
        for name in (
            "Starcoder2PreTrainedModel",
            "Starcoder2Model",
            "Starcoder2ForCausalLM",
            "Starcoder2ForSequenceClassification",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

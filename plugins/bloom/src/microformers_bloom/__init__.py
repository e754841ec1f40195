"""microformers-bloom: Bloom (``model_type: bloom``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "BloomConfig": "configuration_bloom",
    **{
        name: "modeling_bloom"
        for name in (
            "BloomPreTrainedModel",
            "BloomModel",
            "BloomForCausalLM",
            "BloomForSequenceClassification",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

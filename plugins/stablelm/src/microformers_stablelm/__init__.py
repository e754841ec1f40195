"""microformers-stablelm: StableLM (``model_type: stablelm``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "StableLmConfig": "configuration_stablelm",
    **{
        name: "modeling_stablelm"
        for name in (
            "StableLmPreTrainedModel",
            "StableLmModel",
            "StableLmForCausalLM",
            "StableLmForSequenceClassification",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

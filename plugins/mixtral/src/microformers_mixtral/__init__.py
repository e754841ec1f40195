"""microformers-mixtral: Mixtral sparse mixture-of-experts decoders (``model_type: mixtral``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "MixtralConfig": "configuration_mixtral",
    **{
        name: "modeling_mixtral"
        for name in (
            "MixtralPreTrainedModel",
            "MixtralModel",
            "MixtralForCausalLM",
            "MixtralForSequenceClassification",
            "MixtralDecoderLayer",
            "MixtralExpert",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""microformers-phi3: Phi-3 (``model_type: phi3``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Phi3Config": "configuration_phi3",
    **{
        name: "modeling_phi3"
        for name in (
            "Phi3PreTrainedModel",
            "Phi3Model",
            "Phi3ForCausalLM",
            "Phi3ForSequenceClassification",
            "Phi3ForTokenClassification",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""microformers-mixtral: Mixtral sparse mixture-of-experts decoders (``model_type: mixtral``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "MixtralConfig": "configuration_mixtral",
    "MixtralPreTrainedModel": "modeling_mixtral",
    "MixtralModel": "modeling_mixtral",
    "MixtralForCausalLM": "modeling_mixtral",
    "MixtralForSequenceClassification": "modeling_mixtral",
    "MixtralDecoderLayer": "modeling_mixtral",
    "MixtralExpert": "modeling_mixtral",
    # building blocks other plugins derive from (microformers-qwen2-moe)
    "MixtralAttention": "modeling_mixtral",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""microformers-qwen2-moe: Qwen2-MoE sparse mixture-of-experts decoders (``model_type: qwen2_moe``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Qwen2MoeConfig": "configuration_qwen2_moe",
    **{
        name: "modeling_qwen2_moe"
        for name in (
            "Qwen2MoePreTrainedModel",
            "Qwen2MoeModel",
            "Qwen2MoeForCausalLM",
            "Qwen2MoeForSequenceClassification",
            "Qwen2MoeDecoderLayer",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""microformers-llama: Llama, Mistral, Qwen2 and Qwen3 (``model_type`` llama / mistral / qwen2 / qwen3) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "LlamaConfig": "configuration_llama",
    "MistralConfig": "configuration_mistral",
    "Qwen2Config": "configuration_qwen2",
    "Qwen3Config": "configuration_qwen3",
    **{
        name: "modeling_llama"
        for name in ("LlamaPreTrainedModel", "LlamaModel", "LlamaForCausalLM", "LlamaForSequenceClassification")
    },
    **{name: "modeling_mistral" for name in ("MistralModel", "MistralForCausalLM", "MistralForSequenceClassification")},
    **{name: "modeling_qwen2" for name in ("Qwen2Model", "Qwen2ForCausalLM", "Qwen2ForSequenceClassification")},
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

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
    "LlamaPreTrainedModel": "modeling_llama",
    "LlamaModel": "modeling_llama",
    "LlamaForCausalLM": "modeling_llama",
    "LlamaForSequenceClassification": "modeling_llama",
    "MistralModel": "modeling_mistral",
    "MistralForCausalLM": "modeling_mistral",
    "MistralForSequenceClassification": "modeling_mistral",
    "Qwen2Model": "modeling_qwen2",
    "Qwen2ForCausalLM": "modeling_qwen2",
    "Qwen2ForSequenceClassification": "modeling_qwen2",
    "Qwen3Attention": "modeling_qwen3",
    "Qwen3DecoderLayer": "modeling_qwen3",
    "Qwen3Model": "modeling_qwen3",
    "Qwen3ForCausalLM": "modeling_qwen3",
    "Qwen3ForSequenceClassification": "modeling_qwen3",
    # building blocks other plugins derive from (microformers-phi3)
    "LlamaAttention": "modeling_llama",
    "LlamaDecoderLayer": "modeling_llama",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

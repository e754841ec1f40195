"""Entry point ``llama``: registers the Llama, Mistral, Qwen2 and Qwen3 configs and model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_PACKAGE = "microformers_llama"

# model_type -> (module suffix, class-name prefix)
FAMILIES: dict[str, tuple[str, str]] = {
    "llama": ("llama", "Llama"),
    "mistral": ("mistral", "Mistral"),
    "qwen2": ("qwen2", "Qwen2"),
    "qwen3": ("qwen3", "Qwen3"),
}

HEADS: dict[str, str] = {
    "AutoModel": "Model",
    "AutoModelForCausalLM": "ForCausalLM",
    "AutoModelForSequenceClassification": "ForSequenceClassification",
}


@hookimpl
def register_models(register: Any) -> None:
    for model_type, (module, prefix) in FAMILIES.items():
        register(
            model_type,
            f"{_PACKAGE}.configuration_{module}:{prefix}Config",
            {auto: f"{_PACKAGE}.modeling_{module}:{prefix}{suffix}" for auto, suffix in HEADS.items()},
        )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    for name in ("llama", "mistral", "qwen2", "qwen3"):
        register(name, f"{_PACKAGE}.gguf_mapping:{name.upper()}")

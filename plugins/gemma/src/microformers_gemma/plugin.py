"""Entry point ``gemma``: registers the Gemma 2 and Gemma 3 (text) configs and model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_PACKAGE = "microformers_gemma"

# model_type -> (module suffix, config class, {Auto class: model class})
MODELS: dict[str, tuple[str, str, dict[str, str]]] = {
    "gemma2": (
        "gemma2",
        "Gemma2Config",
        {
            "AutoModel": "Gemma2Model",
            "AutoModelForCausalLM": "Gemma2ForCausalLM",
            "AutoModelForSequenceClassification": "Gemma2ForSequenceClassification",
        },
    ),
    "gemma3_text": (
        "gemma3",
        "Gemma3TextConfig",
        {
            "AutoModel": "Gemma3TextModel",
            "AutoModelForCausalLM": "Gemma3ForCausalLM",
            "AutoModelForSequenceClassification": "Gemma3TextForSequenceClassification",
        },
    ),
}


@hookimpl
def register_models(register: Any) -> None:
    for model_type, (module, config_class, heads) in MODELS.items():
        register(
            model_type,
            f"{_PACKAGE}.configuration_{module}:{config_class}",
            {auto: f"{_PACKAGE}.modeling_{module}:{name}" for auto, name in heads.items()},
        )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("gemma2", f"{_PACKAGE}.gguf_mapping:GEMMA2")
    register("gemma3", f"{_PACKAGE}.gguf_mapping:GEMMA3")

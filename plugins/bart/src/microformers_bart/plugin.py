"""Entry point ``bart``: registers BART (``model_type: bart``) and mBART (``mbart``) configs and heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

HEADS: dict[str, str] = {
    "AutoModel": "Model",
    "AutoModelForSeq2SeqLM": "ForConditionalGeneration",
    "AutoModelForSequenceClassification": "ForSequenceClassification",
    "AutoModelForQuestionAnswering": "ForQuestionAnswering",
}

# model_type -> (modeling module stem, class prefix)
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "bart": ("bart", "Bart"),
    "mbart": ("mbart", "MBart"),
}


@hookimpl
def register_models(register: Any) -> None:
    for model_type, (stem, prefix) in ARCHITECTURES.items():
        register(
            model_type,
            f"microformers_bart.configuration_bart:{prefix}Config",
            {auto: f"microformers_bart.modeling_{stem}:{prefix}{suffix}" for auto, suffix in HEADS.items()},
        )

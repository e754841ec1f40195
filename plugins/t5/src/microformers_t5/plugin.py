"""Entry point ``t5``: registers T5, mT5 and UMT5 configs and their model heads as ``"module:Name"`` strings.

Discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_t5.modeling_t5"

# Auto class -> class name suffix. "AutoModelForTextEncoding" is the reference's name for the encoder alone;
# registering it also makes "T5EncoderModel" in config.architectures resolve.
HEADS: dict[str, str] = {
    "AutoModel": "Model",
    "AutoModelForSeq2SeqLM": "ForConditionalGeneration",
    "AutoModelForTextEncoding": "EncoderModel",
    "AutoModelForSequenceClassification": "ForSequenceClassification",
    "AutoModelForTokenClassification": "ForTokenClassification",
    "AutoModelForQuestionAnswering": "ForQuestionAnswering",
}

# model_type -> class prefix
ARCHITECTURES: dict[str, str] = {"t5": "T5", "mt5": "MT5", "umt5": "UMT5"}


@hookimpl
def register_models(register: Any) -> None:
    for model_type, prefix in ARCHITECTURES.items():
        register(
            model_type,
            f"microformers_t5.configuration_t5:{prefix}Config",
            {auto: f"{_MODELING}:{prefix}{suffix}" for auto, suffix in HEADS.items()},
        )

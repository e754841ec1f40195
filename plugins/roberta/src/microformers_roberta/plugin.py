"""Entry point ``roberta``: registers RoBERTa and XLM-RoBERTa configs and heads as ``"module:Name"`` strings.

Discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

HEADS: dict[str, str] = {
    "AutoModel": "Model",
    "AutoModelForMaskedLM": "ForMaskedLM",
    "AutoModelForSequenceClassification": "ForSequenceClassification",
    "AutoModelForTokenClassification": "ForTokenClassification",
    "AutoModelForQuestionAnswering": "ForQuestionAnswering",
    "AutoModelForMultipleChoice": "ForMultipleChoice",
    "AutoModelForCausalLM": "ForCausalLM",
}

# model_type -> (module stem, class prefix)
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "roberta": ("roberta", "Roberta"),
    "xlm-roberta": ("xlm_roberta", "XLMRoberta"),
}


@hookimpl
def register_models(register: Any) -> None:
    for model_type, (stem, prefix) in ARCHITECTURES.items():
        register(
            model_type,
            f"microformers_roberta.configuration_{stem}:{prefix}Config",
            {auto: f"microformers_roberta.modeling_{stem}:{prefix}{suffix}" for auto, suffix in HEADS.items()},
        )

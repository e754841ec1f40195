"""Entry point ``distilbert``: registers the DistilBERT config and heads as ``"module:Name"`` strings (no torch)."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_distilbert.modeling_distilbert"

HEADS: dict[str, str] = {
    "AutoModel": "DistilBertModel",
    "AutoModelForMaskedLM": "DistilBertForMaskedLM",
    "AutoModelForSequenceClassification": "DistilBertForSequenceClassification",
    "AutoModelForTokenClassification": "DistilBertForTokenClassification",
    "AutoModelForQuestionAnswering": "DistilBertForQuestionAnswering",
    "AutoModelForMultipleChoice": "DistilBertForMultipleChoice",
}


@hookimpl
def register_models(register: Any) -> None:
    register(
        "distilbert",
        "microformers_distilbert.configuration_distilbert:DistilBertConfig",
        {auto: f"{_MODELING}:{name}" for auto, name in HEADS.items()},
    )

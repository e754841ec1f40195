"""microformers-bert: BERT encoders (``model_type: bert``) and their task heads for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "BertConfig": "configuration_bert",
    **{
        name: "modeling_bert"
        for name in (
            "BertPreTrainedModel",
            "BertModel",
            "BertForMaskedLM",
            "BertForPreTraining",
            "BertForPreTrainingOutput",
            "BertForNextSentencePrediction",
            "BertForSequenceClassification",
            "BertForTokenClassification",
            "BertForQuestionAnswering",
            "BertInputError",
        )
    },
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'microformers_bert' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

"""microformers-distilbert: DistilBERT (``model_type: distilbert``) and its task heads for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "DistilBertConfig": "configuration_distilbert",
    **{
        name: "modeling_distilbert"
        for name in (
            "DistilBertPreTrainedModel",
            "DistilBertModel",
            "DistilBertForMaskedLM",
            "DistilBertForSequenceClassification",
            "DistilBertForTokenClassification",
            "DistilBertForQuestionAnswering",
            "DistilBertForMultipleChoice",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

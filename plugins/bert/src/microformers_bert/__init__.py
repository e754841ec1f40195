"""microformers-bert: BERT encoders (``model_type: bert``) and their task heads for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""microformers-bert: BERT encoders (``model_type: bert``) and their task heads for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "BertConfig": "configuration_bert",
    "check_chunk_size": "configuration_bert",
    "BertPreTrainedModel": "modeling_bert",
    "BertModel": "modeling_bert",
    "BertForMaskedLM": "modeling_bert",
    "BertForPreTraining": "modeling_bert",
    "BertForPreTrainingOutput": "modeling_bert",
    "BertForNextSentencePrediction": "modeling_bert",
    "BertForSequenceClassification": "modeling_bert",
    "BertForTokenClassification": "modeling_bert",
    "BertForQuestionAnswering": "modeling_bert",
    "BertForMultipleChoice": "modeling_bert",
    "BertLMHeadModel": "modeling_bert",
    "BertInputError": "modeling_bert",
    # building blocks other plugins derive from (microformers-roberta)
    "BertEmbeddings": "modeling_bert",
    "BertEncoder": "modeling_bert",
    "BertPooler": "modeling_bert",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

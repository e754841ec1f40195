"""Entry point ``bert``: registers the BERT config and its model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_bert.modeling_bert"

HEADS: dict[str, str] = {
    "AutoModel": "BertModel",
    "AutoModelForMaskedLM": "BertForMaskedLM",
    "AutoModelForPreTraining": "BertForPreTraining",
    "AutoModelForNextSentencePrediction": "BertForNextSentencePrediction",
    "AutoModelForSequenceClassification": "BertForSequenceClassification",
    "AutoModelForTokenClassification": "BertForTokenClassification",
    "AutoModelForQuestionAnswering": "BertForQuestionAnswering",
    "AutoModelForMultipleChoice": "BertForMultipleChoice",
    "AutoModelForCausalLM": "BertLMHeadModel",
}


@hookimpl
def register_models(register: Any) -> None:
    register(
        "bert",
        "microformers_bert.configuration_bert:BertConfig",
        {auto: f"{_MODELING}:{name}" for auto, name in HEADS.items()},
    )

"""microformers-roberta: RoBERTa (``model_type: roberta``) and XLM-RoBERTa (``xlm-roberta``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_HEADS = ("PreTrainedModel", "Model", "ForMaskedLM", "ForCausalLM", "ForSequenceClassification",
          "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice")  # fmt: skip

_LAZY: dict[str, str] = {
    "RobertaConfig": "configuration_roberta",
    "XLMRobertaConfig": "configuration_xlm_roberta",
    "RobertaInputError": "modeling_roberta",
    **{f"Roberta{head}": "modeling_roberta" for head in _HEADS},
    **{f"XLMRoberta{head}": "modeling_xlm_roberta" for head in _HEADS if head != "PreTrainedModel"},
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

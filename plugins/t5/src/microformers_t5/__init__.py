"""microformers-t5: T5, T5 v1.1 / Flan-T5, mT5 and UMT5 encoder-decoders (``model_type: t5 / mt5 / umt5``).

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "T5Config": "configuration_t5",
    "MT5Config": "configuration_t5",
    "UMT5Config": "configuration_t5",
    "T5PreTrainedModel": "modeling_t5",
    "T5InputError": "modeling_t5",
    "T5Model": "modeling_t5",
    "T5ForConditionalGeneration": "modeling_t5",
    "T5EncoderModel": "modeling_t5",
    "T5ForSequenceClassification": "modeling_t5",
    "T5ForTokenClassification": "modeling_t5",
    "T5ForQuestionAnswering": "modeling_t5",
    "MT5Model": "modeling_t5",
    "MT5ForConditionalGeneration": "modeling_t5",
    "MT5EncoderModel": "modeling_t5",
    "MT5ForSequenceClassification": "modeling_t5",
    "MT5ForTokenClassification": "modeling_t5",
    "MT5ForQuestionAnswering": "modeling_t5",
    "UMT5Model": "modeling_t5",
    "UMT5ForConditionalGeneration": "modeling_t5",
    "UMT5EncoderModel": "modeling_t5",
    "UMT5ForSequenceClassification": "modeling_t5",
    "UMT5ForTokenClassification": "modeling_t5",
    "UMT5ForQuestionAnswering": "modeling_t5",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""microformers-bart: BART (``model_type: bart``) and mBART (``mbart``) encoder-decoders for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "BartConfig": "configuration_bart",
    "MBartConfig": "configuration_bart",
    "BartPreTrainedModel": "modeling_bart",
    "BartModel": "modeling_bart",
    "BartForConditionalGeneration": "modeling_bart",
    "BartForSequenceClassification": "modeling_bart",
    "BartForQuestionAnswering": "modeling_bart",
    "BartInputError": "modeling_bart",
    # building blocks other plugins derive from (microformers-marian)
    "BartAttention": "modeling_bart",
    "BartEncoderLayer": "modeling_bart",
    "BartDecoderLayer": "modeling_bart",
    "BartEncoder": "modeling_bart",
    "BartDecoder": "modeling_bart",
    "MBartPreTrainedModel": "modeling_mbart",
    "MBartModel": "modeling_mbart",
    "MBartForConditionalGeneration": "modeling_mbart",
    "MBartForSequenceClassification": "modeling_mbart",
    "MBartForQuestionAnswering": "modeling_mbart",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""microformers-gpt2: GPT-2 (``model_type: gpt2``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "GPT2Config": "configuration_gpt2",
    **{
        name: "modeling_gpt2"
        for name in (
            "Conv1D",
            "GPT2PreTrainedModel",
            "GPT2Model",
            "GPT2LMHeadModel",
            "GPT2ForSequenceClassification",
            "GPT2InputError",
        )
    },
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

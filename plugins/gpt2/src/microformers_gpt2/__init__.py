"""microformers-gpt2: GPT-2 (``model_type: gpt2``) for microformers.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'microformers_gpt2' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

"""microformers-trainer: Trainer, TrainingArguments, callbacks, data collators, schedules and Adafactor.

Importing the package is cheap; each name loads (with torch) on first access. The same names are
available as ``from microformers import Trainer, ...`` through the plugin's ``register_exports`` hook.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

from .plugin import EXPORTS

__version__ = "0.1.0"

_LAZY: dict[str, str] = dict(EXPORTS)

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

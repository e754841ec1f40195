"""microformers-peft: LoRA adapters with the files of the ``peft`` library.

Importing the package is cheap; torch loads on first use of the adapter classes.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "PeftConfig": "config",
    "LoraConfig": "config",
    "AdapterError": "config",
    "LoraAdapters": "lora",
    "LoraLayer": "layers",
    "ModulesToSave": "layers",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

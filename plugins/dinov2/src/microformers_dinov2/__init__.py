"""microformers-dinov2: DINOv2. Importing the package is cheap; the model classes load torch on access."""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Dinov2Config": "configuration_dinov2",
    "Dinov2Model": "modeling_dinov2",
    "Dinov2ForImageClassification": "modeling_dinov2",
    "Dinov2PreTrainedModel": "modeling_dinov2",
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

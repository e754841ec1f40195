"""microformers-vit: the Vision Transformer. Importing the package is cheap; the model classes load torch on access."""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "ViTConfig": "configuration_vit",
    "ViTModel": "modeling_vit",
    "ViTForImageClassification": "modeling_vit",
    "ViTPreTrainedModel": "modeling_vit",
    "ViTInputError": "modeling_vit",
    "DeiTConfig": "configuration_deit",
    "DeiTModel": "modeling_deit",
    "DeiTForImageClassification": "modeling_deit",
    "DeiTForImageClassificationWithTeacher": "modeling_deit",
    # Building blocks that architectures sharing ViT's attention and patch embedding (DINOv2) subclass.
    "ViTAttention": "modeling_vit",
    "ViTEncoder": "modeling_vit",
    "ViTPatchEmbeddings": "modeling_vit",
    "ImageClassifierOutput": "modeling_vit",
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""microformers-clip: CLIP and SigLIP (models, image processors, tokenizers, processors). Importing the package is cheap; classes load torch on access."""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "CLIPConfig": "configuration_clip",
    "CLIPTextConfig": "configuration_clip",
    "CLIPVisionConfig": "configuration_clip",
    "SiglipConfig": "configuration_siglip",
    "SiglipTextConfig": "configuration_siglip",
    "SiglipVisionConfig": "configuration_siglip",
    **{
        name: "modeling_clip"
        for name in (
            "CLIPModel",
            "CLIPTextModel",
            "CLIPTextModelWithProjection",
            "CLIPVisionModel",
            "CLIPVisionModelWithProjection",
            "CLIPForImageClassification",
            "CLIPPreTrainedModel",
            "CLIPInputError",
            "CLIPOutput",
        )
    },
    **{
        name: "modeling_siglip"
        for name in (
            "SiglipModel",
            "SiglipTextModel",
            "SiglipVisionModel",
            "SiglipForImageClassification",
            "SiglipPreTrainedModel",
        )
    },
    "CLIPImageProcessor": "image_processing_clip",
    "SiglipImageProcessor": "image_processing_siglip",
    "CLIPTokenizer": "tokenization_clip",
    "CLIPTokenizerFast": "tokenization_clip",
    "SiglipTokenizer": "tokenization_siglip",
    "CLIPProcessor": "processing_clip",
    "SiglipProcessor": "processing_clip",
    "AutoModelForZeroShotImageClassification": "auto",
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

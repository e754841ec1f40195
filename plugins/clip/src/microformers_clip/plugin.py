"""Entry point ``clip``: the CLIP and SigLIP configs and heads, their image processors, processors and
tokenizers.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_P = "microformers_clip"
_CLIP = f"{_P}.modeling_clip"
_SIGLIP = f"{_P}.modeling_siglip"

# model_type -> (config class, {Auto head: model class})
MODELS: dict[str, tuple[str, dict[str, str]]] = {
    "clip": (
        f"{_P}.configuration_clip:CLIPConfig",
        {
            "AutoModel": f"{_CLIP}:CLIPModel",
            "AutoModelForZeroShotImageClassification": f"{_CLIP}:CLIPModel",
            "AutoModelForImageClassification": f"{_CLIP}:CLIPForImageClassification",
        },
    ),
    "clip_text_model": (
        f"{_P}.configuration_clip:CLIPTextConfig",
        {"AutoModel": f"{_CLIP}:CLIPTextModel", "AutoModelForTextEncoding": f"{_CLIP}:CLIPTextModel"},
    ),
    "clip_vision_model": (f"{_P}.configuration_clip:CLIPVisionConfig", {"AutoModel": f"{_CLIP}:CLIPVisionModel"}),
    "siglip": (
        f"{_P}.configuration_siglip:SiglipConfig",
        {
            "AutoModel": f"{_SIGLIP}:SiglipModel",
            "AutoModelForZeroShotImageClassification": f"{_SIGLIP}:SiglipModel",
            "AutoModelForImageClassification": f"{_SIGLIP}:SiglipForImageClassification",
        },
    ),
    "siglip_text_model": (f"{_P}.configuration_siglip:SiglipTextConfig", {"AutoModel": f"{_SIGLIP}:SiglipTextModel"}),
    "siglip_vision_model": (
        f"{_P}.configuration_siglip:SiglipVisionConfig",
        {"AutoModel": f"{_SIGLIP}:SiglipVisionModel"},
    ),
}

# name -> (module:class, role, model types it is the default for)
PROCESSORS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "CLIPImageProcessor": (
        f"{_P}.image_processing_clip:CLIPImageProcessor",
        "image_processor",
        ("clip", "clip_vision_model"),
    ),
    "SiglipImageProcessor": (
        f"{_P}.image_processing_siglip:SiglipImageProcessor",
        "image_processor",
        ("siglip", "siglip_vision_model"),
    ),
    # Saved by the reference's torchvision-backed processors (and CLIP's old feature extractor): same numbers.
    "CLIPImageProcessorFast": (f"{_P}.image_processing_clip:CLIPImageProcessor", "image_processor", ()),
    "CLIPFeatureExtractor": (f"{_P}.image_processing_clip:CLIPImageProcessor", "image_processor", ()),
    "SiglipImageProcessorFast": (f"{_P}.image_processing_siglip:SiglipImageProcessor", "image_processor", ()),
    "CLIPProcessor": (f"{_P}.processing_clip:CLIPProcessor", "processor", ("clip",)),
    "SiglipProcessor": (f"{_P}.processing_clip:SiglipProcessor", "processor", ("siglip",)),
}

EXPORTS: dict[str, str] = {
    "CLIPConfig": f"{_P}.configuration_clip:CLIPConfig",
    "CLIPTextConfig": f"{_P}.configuration_clip:CLIPTextConfig",
    "CLIPVisionConfig": f"{_P}.configuration_clip:CLIPVisionConfig",
    "CLIPModel": f"{_CLIP}:CLIPModel",
    "CLIPTextModel": f"{_CLIP}:CLIPTextModel",
    "CLIPTextModelWithProjection": f"{_CLIP}:CLIPTextModelWithProjection",
    "CLIPVisionModel": f"{_CLIP}:CLIPVisionModel",
    "CLIPVisionModelWithProjection": f"{_CLIP}:CLIPVisionModelWithProjection",
    "CLIPForImageClassification": f"{_CLIP}:CLIPForImageClassification",
    "SiglipConfig": f"{_P}.configuration_siglip:SiglipConfig",
    "SiglipTextConfig": f"{_P}.configuration_siglip:SiglipTextConfig",
    "SiglipVisionConfig": f"{_P}.configuration_siglip:SiglipVisionConfig",
    "SiglipModel": f"{_SIGLIP}:SiglipModel",
    "SiglipTextModel": f"{_SIGLIP}:SiglipTextModel",
    "SiglipVisionModel": f"{_SIGLIP}:SiglipVisionModel",
    "SiglipForImageClassification": f"{_SIGLIP}:SiglipForImageClassification",
    "CLIPImageProcessor": f"{_P}.image_processing_clip:CLIPImageProcessor",
    "SiglipImageProcessor": f"{_P}.image_processing_siglip:SiglipImageProcessor",
    "CLIPTokenizer": f"{_P}.tokenization_clip:CLIPTokenizer",
    "CLIPTokenizerFast": f"{_P}.tokenization_clip:CLIPTokenizerFast",
    "SiglipTokenizer": f"{_P}.tokenization_siglip:SiglipTokenizer",
    "CLIPProcessor": f"{_P}.processing_clip:CLIPProcessor",
    "SiglipProcessor": f"{_P}.processing_clip:SiglipProcessor",
    "AutoModelForZeroShotImageClassification": f"{_P}.auto:AutoModelForZeroShotImageClassification",
}


@hookimpl
def register_models(register: Any) -> None:
    for model_type, (config, heads) in MODELS.items():
        register(model_type, config, heads)


@hookimpl
def register_processors(register: Any) -> None:
    for name, (ref, role, model_types) in PROCESSORS.items():
        register(name, ref, role=role, model_types=model_types)


@hookimpl
def register_tokenizers(register: Any) -> None:
    register(
        "clip",
        f"{_P}.tokenization_clip:CLIPTokenizerFast",
        tokenizer_classes=("CLIPTokenizer", "CLIPTokenizerFast"),
        priority=-10,
    )
    register(
        "siglip",
        f"{_P}.tokenization_siglip:SiglipTokenizer",
        tokenizer_classes=("SiglipTokenizer",),
        priority=-10,
    )


@hookimpl
def register_exports(register: Any) -> None:
    for name, ref in EXPORTS.items():
        register(name, ref)

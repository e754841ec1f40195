"""Entry point ``vision``: image processors, the image pipelines and public names.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither numpy, Pillow nor torch.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_P = "microformers_vision"

# name -> (module:class, role, model types it is the default for)
PROCESSORS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "ViTImageProcessor": (f"{_P}.image_processing_vit:ViTImageProcessor", "image_processor", ("vit",)),
    "BitImageProcessor": (f"{_P}.image_processing_bit:BitImageProcessor", "image_processor", ("bit", "dinov2")),
    "DeiTImageProcessor": (f"{_P}.image_processing_deit:DeiTImageProcessor", "image_processor", ("deit",)),
    # Saved by the reference's torchvision-backed processors; same settings, same numbers.
    "ViTImageProcessorFast": (f"{_P}.image_processing_vit:ViTImageProcessor", "image_processor", ()),
    "BitImageProcessorFast": (f"{_P}.image_processing_bit:BitImageProcessor", "image_processor", ()),
    "DeiTImageProcessorFast": (f"{_P}.image_processing_deit:DeiTImageProcessor", "image_processor", ()),
}

EXPORTS: dict[str, str] = {
    "ViTImageProcessor": f"{_P}.image_processing_vit:ViTImageProcessor",
    "BitImageProcessor": f"{_P}.image_processing_bit:BitImageProcessor",
    "DeiTImageProcessor": f"{_P}.image_processing_deit:DeiTImageProcessor",
    "BaseImageProcessor": f"{_P}.image_processing_utils:BaseImageProcessor",
    "ImageProcessingMixin": f"{_P}.image_processing_utils:ImageProcessingMixin",
    "ImageClassificationPipeline": f"{_P}.pipelines:ImageClassificationPipeline",
    "ImageFeatureExtractionPipeline": f"{_P}.pipelines:ImageFeatureExtractionPipeline",
    "ZeroShotImageClassificationPipeline": f"{_P}.pipelines:ZeroShotImageClassificationPipeline",
}


@hookimpl
def register_processors(register: Any) -> None:
    for name, (ref, role, model_types) in PROCESSORS.items():
        register(name, ref, role=role, model_types=model_types)


@hookimpl
def register_pipelines(register: Any) -> None:
    register(
        "image-classification",
        f"{_P}.pipelines:ImageClassificationPipeline",
        model_class=("AutoModelForImageClassification",),
    )
    register(
        "image-feature-extraction",
        f"{_P}.pipelines:ImageFeatureExtractionPipeline",
        model_class=("AutoModel",),
    )
    # Image-text models (CLIP, SigLIP) register this head; the pipeline needs their tokenizer too.
    register(
        "zero-shot-image-classification",
        f"{_P}.pipelines:ZeroShotImageClassificationPipeline",
        model_class=("AutoModelForZeroShotImageClassification",),
    )


@hookimpl
def register_exports(register: Any) -> None:
    for name, ref in EXPORTS.items():
        register(name, ref)

"""microformers-vision: image inputs and transforms, image processors and the image pipelines.

Importing the package is cheap; classes load (with numpy/Pillow/torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "ViTImageProcessor": "image_processing_vit",
    "BitImageProcessor": "image_processing_bit",
    "DeiTImageProcessor": "image_processing_deit",
    "BaseImageProcessor": "image_processing_utils",
    "ImageProcessingMixin": "image_processing_utils",
    "get_size_dict": "image_processing_utils",
    "check_backend": "image_processing_utils",
    "ImageClassificationPipeline": "pipelines",
    "ImageFeatureExtractionPipeline": "pipelines",
    "ZeroShotImageClassificationPipeline": "pipelines",
    # Named one by one (not in the tables below) so other plugins' imports of them can be checked.
    "PILImageResampling": "image_utils",
    "IMAGENET_STANDARD_MEAN": "image_utils",
    "IMAGENET_STANDARD_STD": "image_utils",
    "OPENAI_CLIP_MEAN": "image_utils",
    "OPENAI_CLIP_STD": "image_utils",
    **{
        name: "image_utils"
        for name in (
            "ChannelDimension",
            "ImageInputError",
            "infer_channel_dimension_format",
            "load_image",
            "make_flat_list_of_images",
        )
    },
    **{
        name: "image_transforms"
        for name in (
            "center_crop",
            "convert_to_rgb",
            "normalize",
            "pad",
            "rescale",
            "resize",
            "to_channel_dimension_format",
            "to_pil_image",
        )
    },
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

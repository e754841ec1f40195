"""``ViTImageProcessor``: resize to ``size`` (224x224, bilinear), rescale by 1/255, normalize with mean = std = 0.5.

The same settings, file and numbers as the reference implementation's (PIL-based) ViT image processor;
``ViTImageProcessorFast`` in a saved file loads this class too (the outputs agree to float precision).
"""

from __future__ import annotations

from typing import Any, ClassVar

from .image_processing_utils import BaseImageProcessor
from .image_utils import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, PILImageResampling

__all__ = ["ViTImageProcessor"]


class ViTImageProcessor(BaseImageProcessor):
    resample: ClassVar[int | None] = PILImageResampling.BILINEAR
    image_mean: ClassVar[Any] = IMAGENET_STANDARD_MEAN
    image_std: ClassVar[Any] = IMAGENET_STANDARD_STD
    size: ClassVar[dict[str, int] | None] = {"height": 224, "width": 224}
    do_resize: ClassVar[bool | None] = True
    do_rescale: ClassVar[bool | None] = True
    do_normalize: ClassVar[bool | None] = True

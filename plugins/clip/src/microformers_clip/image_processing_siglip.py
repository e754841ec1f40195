"""``SiglipImageProcessor``: resize to 224x224 (bicubic), rescale by 1/255, normalize with mean = std = 0.5, grey
and RGBA converted to RGB first; no crop.

The same settings, file and numbers as the reference implementation's (PIL-based) SigLIP image processor.
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers_vision import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, BaseImageProcessor, PILImageResampling

__all__ = ["SiglipImageProcessor"]


class SiglipImageProcessor(BaseImageProcessor):
    resample: ClassVar[int | None] = PILImageResampling.BICUBIC
    image_mean: ClassVar[Any] = IMAGENET_STANDARD_MEAN
    image_std: ClassVar[Any] = IMAGENET_STANDARD_STD
    size: ClassVar[dict[str, int] | None] = {"height": 224, "width": 224}
    default_to_square: ClassVar[bool] = False
    do_resize: ClassVar[bool | None] = True
    do_rescale: ClassVar[bool | None] = True
    do_normalize: ClassVar[bool | None] = True
    do_convert_rgb: ClassVar[bool | None] = True

"""``DeiTImageProcessor``: resize to 256x256 (bicubic), center crop 224x224, rescale by 1/255, normalize with
mean = std = 0.5; the same settings, file and numbers as the reference implementation's (PIL-based) one."""

from __future__ import annotations

from typing import Any, ClassVar

from .image_processing_utils import BaseImageProcessor
from .image_utils import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, PILImageResampling

__all__ = ["DeiTImageProcessor"]


class DeiTImageProcessor(BaseImageProcessor):
    resample: ClassVar[int | None] = PILImageResampling.BICUBIC
    image_mean: ClassVar[Any] = IMAGENET_STANDARD_MEAN
    image_std: ClassVar[Any] = IMAGENET_STANDARD_STD
    size: ClassVar[dict[str, int] | None] = {"height": 256, "width": 256}
    crop_size: ClassVar[dict[str, int] | None] = {"height": 224, "width": 224}
    do_resize: ClassVar[bool | None] = True
    do_center_crop: ClassVar[bool | None] = True
    do_rescale: ClassVar[bool | None] = True
    do_normalize: ClassVar[bool | None] = True

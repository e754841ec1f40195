"""``BitImageProcessor`` (BiT, DINOv2): shorter edge to 224 (bicubic, aspect kept), center crop 224x224, rescale by
1/255, normalize with CLIP's mean and std, grey and RGBA converted to RGB first.

The same settings, file and numbers as the reference implementation's (PIL-based) BiT image processor.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .image_processing_utils import BaseImageProcessor
from .image_utils import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, PILImageResampling

__all__ = ["BitImageProcessor"]


class BitImageProcessor(BaseImageProcessor):
    resample: ClassVar[int | None] = PILImageResampling.BICUBIC
    image_mean: ClassVar[Any] = OPENAI_CLIP_MEAN
    image_std: ClassVar[Any] = OPENAI_CLIP_STD
    size: ClassVar[dict[str, int] | None] = {"shortest_edge": 224}
    default_to_square: ClassVar[bool] = False
    crop_size: ClassVar[dict[str, int] | None] = {"height": 224, "width": 224}
    do_resize: ClassVar[bool | None] = True
    do_center_crop: ClassVar[bool | None] = True
    do_rescale: ClassVar[bool | None] = True
    do_normalize: ClassVar[bool | None] = True
    do_convert_rgb: ClassVar[bool | None] = True

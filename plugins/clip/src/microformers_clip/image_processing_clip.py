"""``CLIPImageProcessor``: shorter edge to 224 (bicubic, aspect kept), center crop 224x224, rescale by 1/255,
normalize with CLIP's mean and std, grey and RGBA converted to RGB first.

The same settings, file and numbers as the reference implementation's (PIL-based) CLIP image processor;
``use_square_size=True`` (a setting of some saved files) resizes to a square of the shorter-edge size instead.
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers_vision import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, BaseImageProcessor, PILImageResampling

__all__ = ["CLIPImageProcessor"]


class CLIPImageProcessor(BaseImageProcessor):
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

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.pop("use_square_size", False):
            size = kwargs.get("size") or type(self).size
            side = size if isinstance(size, int) else size.get("shortest_edge")
            if side is None:
                side = size.get("height")
            kwargs["size"] = {"height": side, "width": side}
        super().__init__(**kwargs)

"""Reading image inputs: PIL images, numpy arrays and torch tensors (HWC or CHW, one or a batch), files and bytes.

Rules, as in the reference implementation:

- a 3-D array is one image, a 4-D array a batch; a list holds images (or lists of images, flattened);
- the channel axis is found by size (1, 3 or 4 channels first or last; first wins when both fit);
- files and bytes are decoded by Pillow; ``http(s)://`` addresses are refused (microformers never downloads
  images: fetch the file yourself and pass its path or bytes).

Unreadable files, 0-pixel images and unsupported modes raise :class:`ImageInputError` naming the input.
"""

from __future__ import annotations

import base64
import enum
import io
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import PIL.Image

from microformers.errors import FileMissingError, InputError

__all__ = [
    "IMAGENET_DEFAULT_MEAN",
    "IMAGENET_DEFAULT_STD",
    "IMAGENET_STANDARD_MEAN",
    "IMAGENET_STANDARD_STD",
    "OPENAI_CLIP_MEAN",
    "OPENAI_CLIP_STD",
    "ChannelDimension",
    "ImageInputError",
    "PILImageResampling",
    "describe",
    "get_channel_dimension_axis",
    "get_image_size",
    "infer_channel_dimension_format",
    "is_batched",
    "load_image",
    "make_flat_list_of_images",
    "to_numpy_array",
]

IMAGENET_DEFAULT_MEAN = [0.485, 0.456, 0.406]
IMAGENET_DEFAULT_STD = [0.229, 0.224, 0.225]
IMAGENET_STANDARD_MEAN = [0.5, 0.5, 0.5]
IMAGENET_STANDARD_STD = [0.5, 0.5, 0.5]
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

PILImageResampling = PIL.Image.Resampling


class ImageInputError(InputError):
    """An image input cannot be read, or has an unusable shape, size or mode."""


class ChannelDimension(enum.StrEnum):
    FIRST = "channels_first"
    LAST = "channels_last"


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def describe(image: Any) -> str:
    """A short name for an input, for error messages."""
    if isinstance(image, PIL.Image.Image):
        return f"PIL image (mode {image.mode}, size {image.size[0]}x{image.size[1]})"
    if isinstance(image, np.ndarray) or _is_torch(image):
        return f"{type(image).__name__} of shape {tuple(image.shape)} and dtype {image.dtype}"
    if isinstance(image, str) and image.startswith("data:"):
        return f"a data URL of {len(image)} characters"
    if isinstance(image, (str, os.PathLike)):
        return f"'{os.fspath(image)}'"
    if isinstance(image, (bytes, bytearray)):
        return f"{len(image)} bytes of image data"
    return type(image).__name__


def to_numpy_array(image: Any) -> np.ndarray:
    """A numpy view/copy of a PIL image, array or tensor."""
    if isinstance(image, PIL.Image.Image):
        return np.array(image)
    if _is_torch(image):
        return image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        return image
    raise ImageInputError(f"cannot read {describe(image)} as an image; pass a PIL image, numpy array or torch tensor")


def infer_channel_dimension_format(
    image: np.ndarray, num_channels: int | tuple[int, ...] | None = None
) -> ChannelDimension:
    """Channels first or last, judged by which axis has 1/3 channels (or ``num_channels``); first wins a tie."""
    num_channels = (1, 3) if num_channels is None else num_channels
    num_channels = (num_channels,) if isinstance(num_channels, int) else num_channels
    if image.ndim not in (3, 4, 5):
        raise ImageInputError(f"an image array has 3 dimensions (or 4 for a batch); got shape {tuple(image.shape)}")
    first, last = image.ndim - 3, image.ndim - 1
    if image.shape[first] in num_channels:
        return ChannelDimension.FIRST
    if image.shape[last] in num_channels:
        return ChannelDimension.LAST
    raise ImageInputError(
        f"cannot tell the channel axis of an image of shape {tuple(image.shape)}: neither the first nor the last "
        f"axis has {' or '.join(map(str, num_channels))} channels"
    )


def get_channel_dimension_axis(image: np.ndarray, input_data_format: ChannelDimension | str | None = None) -> int:
    if input_data_format is None:
        input_data_format = infer_channel_dimension_format(image)
    if ChannelDimension(input_data_format) == ChannelDimension.FIRST:
        return image.ndim - 3
    return image.ndim - 1


def get_image_size(image: np.ndarray, channel_dim: ChannelDimension | str | None = None) -> tuple[int, int]:
    """``(height, width)``."""
    if channel_dim is None:
        channel_dim = infer_channel_dimension_format(image)
    if ChannelDimension(channel_dim) == ChannelDimension.FIRST:
        return image.shape[-2], image.shape[-1]
    return image.shape[-3], image.shape[-2]


def load_image(image: Any) -> Any:
    """A path, ``file://`` address, ``data:image/...;base64,`` URL or bytes -> PIL image (decoded now, so a truncated
    file fails here)."""
    if isinstance(image, (bytes, bytearray)):
        source: Any = io.BytesIO(bytes(image))
        name = f"{len(image)} bytes of image data"
    elif isinstance(image, str) and image.startswith("data:image/"):
        try:
            source = io.BytesIO(base64.b64decode(image.partition(",")[2], validate=True))
        except ValueError as exc:
            raise ImageInputError(f"the data URL {image[:40]!r}... does not hold valid base64 ({exc})") from exc
        name = "the data URL's image"
    elif isinstance(image, (str, os.PathLike)):
        path = os.fspath(image)
        if path.startswith(("http://", "https://")):
            raise ImageInputError(
                f"{path!r} is a URL; microformers does not download images. Fetch it yourself and pass the file's "
                "path, its bytes or a PIL image"
            )
        if path.startswith("file://"):
            path = path[len("file://") :]
        if os.path.isdir(path):
            raise ImageInputError(f"'{path}' is a folder, not an image file; pass the path of one image file")
        if not os.path.isfile(path):
            raise FileMissingError(f"image file '{path}' does not exist")
        source, name = path, f"'{path}'"
    else:
        return image
    try:
        with PIL.Image.open(source) as opened:
            opened.load()
            loaded = opened.copy()
    except PIL.Image.DecompressionBombError as exc:
        raise ImageInputError(
            f"{name} is too large to decode safely ({exc}); downscale it first, or raise PIL.Image.MAX_IMAGE_PIXELS "
            "if you trust the file"
        ) from exc
    except (PIL.UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageInputError(
            f"{name} is not a readable image ({exc}); pass a PNG, JPEG or other Pillow format"
        ) from exc
    return loaded


def _is_single_image(value: Any) -> bool:
    if isinstance(value, PIL.Image.Image):
        return True
    if isinstance(value, np.ndarray) or _is_torch(value):
        return value.ndim in (2, 3)
    return False


def is_batched(images: Any) -> bool:
    if isinstance(images, (list, tuple)):
        return True
    return (isinstance(images, np.ndarray) or _is_torch(images)) and images.ndim == 4


def make_flat_list_of_images(images: Any) -> list[Any]:
    """One image, a 4-D batch, or (nested) lists of them -> a flat list of single images."""
    if isinstance(images, (str, os.PathLike, bytes, bytearray)):
        return [load_image(images)]
    if _is_single_image(images):
        return [images]
    if (isinstance(images, np.ndarray) or _is_torch(images)) and images.ndim == 4:
        return list(images)
    if isinstance(images, Sequence) and not isinstance(images, str):
        if len(images) == 0:
            raise ImageInputError("got an empty list of images; pass at least one image")
        flat: list[Any] = []
        for item in images:
            if isinstance(item, (list, tuple)) or (
                (isinstance(item, np.ndarray) or _is_torch(item)) and item.ndim == 4
            ):
                flat.extend(make_flat_list_of_images(item))
            elif isinstance(item, (str, os.PathLike, bytes, bytearray)):
                flat.append(load_image(item))
            elif _is_single_image(item):
                flat.append(item)
            else:
                raise ImageInputError(
                    f"cannot read {describe(item)} as an image; pass PIL images, numpy arrays or torch tensors "
                    "(HWC or CHW), or file paths"
                )
        return flat
    raise ImageInputError(
        f"cannot read {describe(images)} as an image; pass a PIL image, a numpy array or torch tensor (HWC or CHW, "
        "or a 4-D batch), a file path, or a list of them"
    )

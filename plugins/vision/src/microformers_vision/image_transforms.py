"""Image transforms on numpy arrays, with the reference implementation's numbers.

``resize`` goes through Pillow (as the reference does, so the same filters give the same pixels): float images
in [0, 1] are scaled to 0..255 for the trip and back. ``rescale`` multiplies in float64 and casts to float32;
``normalize`` works in float32 (or the input's float dtype).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import Any

import numpy as np
import PIL.Image

from .image_utils import (
    ChannelDimension,
    ImageInputError,
    PILImageResampling,
    get_channel_dimension_axis,
    get_image_size,
    infer_channel_dimension_format,
)

__all__ = [
    "PaddingMode",
    "center_crop",
    "convert_to_rgb",
    "get_resize_output_image_size",
    "get_size_with_aspect_ratio",
    "normalize",
    "pad",
    "rescale",
    "resize",
    "to_channel_dimension_format",
    "to_pil_image",
]


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def to_channel_dimension_format(
    image: Any, channel_dim: ChannelDimension | str, input_channel_dim: ChannelDimension | str | None = None
) -> Any:
    """Move the channel axis of the last three dimensions first or last (numpy arrays or torch tensors)."""
    if not hasattr(image, "ndim"):
        raise ImageInputError(f"expected a numpy array or torch tensor, got {type(image).__name__}")
    if input_channel_dim is None:
        input_channel_dim = infer_channel_dimension_format(image)
    target = ChannelDimension(channel_dim)
    if ChannelDimension(input_channel_dim) == target:
        return image
    lead = list(range(image.ndim - 3))
    if target == ChannelDimension.FIRST:
        axes = [*lead, image.ndim - 1, image.ndim - 3, image.ndim - 2]
    else:
        axes = [*lead, image.ndim - 2, image.ndim - 1, image.ndim - 3]
    return image.transpose(axes) if isinstance(image, np.ndarray) else image.permute(*axes)


def rescale(
    image: np.ndarray,
    scale: float,
    data_format: ChannelDimension | str | None = None,
    dtype: Any = np.float32,
    input_data_format: ChannelDimension | str | None = None,
) -> np.ndarray:
    """``image * scale`` computed in float64, returned as ``dtype``."""
    if not isinstance(image, np.ndarray):
        raise ImageInputError(f"rescale takes a numpy array, got {type(image).__name__}")
    rescaled = image.astype(np.float64) * scale
    if data_format is not None:
        rescaled = to_channel_dimension_format(rescaled, data_format, input_data_format)
    return rescaled.astype(dtype)


def _needs_rescale_for_pil(image: np.ndarray) -> bool:
    """Float images in [0, 1] are scaled to 0..255 before becoming a (uint8) PIL image."""
    if image.dtype == np.uint8:
        return False
    if np.allclose(image, image.astype(int)):
        if np.all(image >= 0) and np.all(image <= 255):
            return False
        raise ImageInputError(
            f"the image holds values in [{image.min()}, {image.max()}], outside 0..255, so it cannot be resized "
            "as an 8-bit image; scale it to 0..255 (or 0..1 floats) first"
        )
    if np.all(image >= 0) and np.all(image <= 1):
        return True
    raise ImageInputError(
        f"the float image holds values in [{image.min()}, {image.max()}]; floats must lie in [0, 1] "
        "(or be whole numbers in 0..255) to be resized"
    )


def to_pil_image(
    image: Any,
    do_rescale: bool | None = None,
    image_mode: str | None = None,
    input_data_format: ChannelDimension | str | None = None,
) -> PIL.Image.Image:
    """A numpy array or tensor -> PIL image (channels last, one channel squeezed, uint8)."""
    if isinstance(image, PIL.Image.Image):
        return image
    if hasattr(image, "detach"):
        image = image.detach().cpu().numpy()
    if not isinstance(image, np.ndarray):
        raise ImageInputError(f"cannot make a PIL image of {type(image).__name__}")
    image = to_channel_dimension_format(image, ChannelDimension.LAST, input_data_format)
    image = np.squeeze(image, axis=-1) if image.shape[-1] == 1 else image
    do_rescale = _needs_rescale_for_pil(image) if do_rescale is None else do_rescale
    if do_rescale:
        image = rescale(image, 255)
    return PIL.Image.fromarray(image.astype(np.uint8), mode=image_mode)


def get_resize_output_image_size(
    input_image: np.ndarray,
    size: int | tuple[int, int] | list[int],
    default_to_square: bool = True,
    max_size: int | None = None,
    input_data_format: ChannelDimension | str | None = None,
) -> tuple[int, int]:
    """Target ``(height, width)``: ``size`` as is for a pair, else the shorter edge to ``size`` (kept ratio)."""
    if isinstance(size, (tuple, list)):
        if len(size) == 2:
            return tuple(size)  # type: ignore[return-value]
        if len(size) != 1:
            raise ImageInputError(f"size must be an int or a (height, width) pair, got {size!r}")
        size = size[0]
    if default_to_square:
        return size, size
    height, width = get_image_size(input_image, input_data_format)
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None:
        if max_size <= size:
            raise ImageInputError(f"max_size={max_size} must be larger than size={size}")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


def get_size_with_aspect_ratio(image_size: tuple[int, int], size: int, max_size: int | None = None) -> tuple[int, int]:
    """``(height, width)`` with the shorter edge ``size`` (aspect kept), shrunk so the longer edge stays within
    ``max_size`` (the ``{"shortest_edge", "longest_edge"}`` size dicts)."""
    height, width = image_size
    raw_size = None
    if max_size is not None:
        short, long = float(min(height, width)), float(max(height, width))
        if long / short * size > max_size:
            raw_size = max_size * short / long
            size = round(raw_size)
    if (height <= width and height == size) or (width <= height and width == size):
        return height, width
    scale = raw_size if raw_size is not None else size
    if width < height:
        return int(scale * height / width), size
    return size, int(scale * width / height)


def resize(
    image: np.ndarray,
    size: tuple[int, int],
    resample: PILImageResampling | int | None = None,
    reducing_gap: int | None = None,
    data_format: ChannelDimension | str | None = None,
    return_numpy: bool = True,
    input_data_format: ChannelDimension | str | None = None,
) -> Any:
    """Resize to ``(height, width)`` with Pillow's ``resample`` filter (bilinear by default).

    Takes a numpy array, a torch tensor (read as a numpy array) or a PIL image (read as channels last; the
    reference implementation fails on the last two).
    """
    resample = PILImageResampling.BILINEAR if resample is None else resample
    if len(size) != 2:
        raise ImageInputError(f"resize: size must be (height, width), got {size!r}")
    height, width = (int(v) for v in size)
    if height <= 0 or width <= 0:
        raise ImageInputError(f"resize: the target size must be positive, got {height}x{width}")
    if _is_tensor(image):
        image = image.detach().cpu().numpy()
    if isinstance(image, PIL.Image.Image):
        input_data_format = ChannelDimension.LAST
    elif not isinstance(image, np.ndarray):
        raise ImageInputError(f"resize takes a numpy array, torch tensor or PIL image, got {type(image).__name__}")
    if input_data_format is None:
        input_data_format = infer_channel_dimension_format(image)
    data_format = input_data_format if data_format is None else data_format
    do_rescale = False
    if not isinstance(image, PIL.Image.Image):
        do_rescale = _needs_rescale_for_pil(image)
        image = to_pil_image(image, do_rescale=do_rescale, input_data_format=input_data_format)
    resized = image.resize((width, height), resample=resample, reducing_gap=reducing_gap)
    if not return_numpy:
        return resized
    array = np.array(resized)
    array = np.expand_dims(array, axis=-1) if array.ndim == 2 else array
    array = to_channel_dimension_format(array, data_format, input_channel_dim=ChannelDimension.LAST)
    return rescale(array, 1 / 255) if do_rescale else array


def normalize(
    image: np.ndarray,
    mean: float | Collection[float],
    std: float | Collection[float],
    data_format: ChannelDimension | str | None = None,
    input_data_format: ChannelDimension | str | None = None,
) -> np.ndarray:
    """``(image - mean) / std`` per channel, in float32 (or the image's own float dtype)."""
    if not isinstance(image, np.ndarray):
        raise ImageInputError(f"normalize takes a numpy array, got {type(image).__name__}")
    if input_data_format is None:
        input_data_format = infer_channel_dimension_format(image)
    channels = image.shape[get_channel_dimension_axis(image, input_data_format)]
    if not np.issubdtype(image.dtype, np.floating):
        image = image.astype(np.float32)
    stats = []
    for name, value in (("image_mean", mean), ("image_std", std)):
        if isinstance(value, Collection):
            if len(value) != channels:
                raise ImageInputError(
                    f"{name} has {len(value)} values but the image has {channels} channels; convert the image to "
                    "RGB (do_convert_rgb=True) or give one value per channel"
                )
        else:
            value = [value] * channels
        stats.append(np.array(value, dtype=image.dtype))
    mean_arr, std_arr = stats
    if ChannelDimension(input_data_format) == ChannelDimension.LAST:
        image = (image - mean_arr) / std_arr
    else:
        image = ((image.T - mean_arr) / std_arr).T
    if data_format is not None:
        image = to_channel_dimension_format(image, data_format, input_data_format)
    return image


def center_crop(
    image: np.ndarray,
    size: tuple[int, int],
    data_format: ChannelDimension | str | None = None,
    input_data_format: ChannelDimension | str | None = None,
) -> np.ndarray:
    """Crop the centre ``(height, width)``; an image smaller than that is zero-padded around it first."""
    if not isinstance(image, np.ndarray):
        raise ImageInputError(f"center_crop takes a numpy array, got {type(image).__name__}")
    if not isinstance(size, Iterable) or len(size) != 2:  # type: ignore[arg-type]
        raise ImageInputError(f"center_crop: size must be (height, width), got {size!r}")
    if input_data_format is None:
        input_data_format = infer_channel_dimension_format(image)
    output_format = input_data_format if data_format is None else data_format
    image = to_channel_dimension_format(image, ChannelDimension.FIRST, input_data_format)
    height, width = get_image_size(image, ChannelDimension.FIRST)
    crop_h, crop_w = (int(v) for v in size)
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    bottom, right = top + crop_h, left + crop_w
    if top >= 0 and bottom <= height and left >= 0 and right <= width:
        return to_channel_dimension_format(image[..., top:bottom, left:right], output_format, ChannelDimension.FIRST)
    new_h, new_w = max(crop_h, height), max(crop_w, width)
    canvas = np.zeros_like(image, shape=(*image.shape[:-2], new_h, new_w))
    top_pad, left_pad = math.ceil((new_h - height) / 2), math.ceil((new_w - width) / 2)
    canvas[..., top_pad : top_pad + height, left_pad : left_pad + width] = image
    top, bottom, left, right = top + top_pad, bottom + top_pad, left + left_pad, right + left_pad
    cropped = canvas[..., max(0, top) : min(new_h, bottom), max(0, left) : min(new_w, right)]
    return to_channel_dimension_format(cropped, output_format, ChannelDimension.FIRST)


class PaddingMode:
    CONSTANT = "constant"
    REFLECT = "reflect"
    REPLICATE = "replicate"
    SYMMETRIC = "symmetric"


_NUMPY_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "symmetric": "symmetric"}


def pad(
    image: np.ndarray,
    padding: int | tuple[int, int] | tuple[tuple[int, int], tuple[int, int]],
    mode: str = PaddingMode.CONSTANT,
    constant_values: float | tuple[Any, ...] = 0.0,
    data_format: ChannelDimension | str | None = None,
    input_data_format: ChannelDimension | str | None = None,
) -> np.ndarray:
    """Pad height and width: ``n``, ``(before, after)`` for both, or ``((top, bottom), (left, right))``.

    A torch tensor is padded as a numpy array (and returned as one), as the reference does.
    """
    if _is_tensor(image):
        image = image.detach().cpu().numpy()
    if not isinstance(image, np.ndarray):
        raise ImageInputError(f"pad takes a numpy array or torch tensor, got {type(image).__name__}")
    if input_data_format is None:
        input_data_format = infer_channel_dimension_format(image)

    def expand(values: Any) -> tuple[Any, ...]:
        if isinstance(values, (int, float)):
            values = ((values, values), (values, values))
        elif isinstance(values, tuple) and len(values) == 1:
            values = ((values[0], values[0]), (values[0], values[0]))
        elif isinstance(values, tuple) and len(values) == 2 and isinstance(values[0], (int, float)):
            values = (values, values)
        elif not (isinstance(values, tuple) and len(values) == 2 and isinstance(values[0], tuple)):
            raise ImageInputError(f"pad: unsupported padding {values!r}; use n, (before, after) or ((t, b), (l, r))")
        values = (
            ((0, 0), *values) if ChannelDimension(input_data_format) == ChannelDimension.FIRST else (*values, (0, 0))
        )
        return ((0, 0), *values) if image.ndim == 4 else values

    mode = getattr(mode, "value", mode)
    if mode == PaddingMode.CONSTANT:
        image = np.pad(image, expand(padding), mode="constant", constant_values=expand(constant_values))
    elif mode in _NUMPY_PAD_MODES:
        image = np.pad(image, expand(padding), mode=_NUMPY_PAD_MODES[mode])
    else:
        raise ImageInputError(f"pad: mode={mode!r} is not one of constant, reflect, replicate, symmetric")
    if data_format is not None:
        image = to_channel_dimension_format(image, data_format, input_data_format)
    return image


def convert_to_rgb(
    image: Any, return_numpy: bool = True, input_data_format: ChannelDimension | str | None = None
) -> Any:
    """An RGB ``(H, W, 3)`` array (same layout as the input for arrays): grey is repeated, alpha composited on white.

    PIL images are converted by Pillow (palette, grey, ``LA``/``RGBA`` and transparency keys); arrays with 1 channel
    are repeated and with 4 channels blended onto white. ``return_numpy=False`` gives a PIL image back for a PIL
    image (the reference's default, which it deprecates); arrays always come back as arrays.
    """
    if not isinstance(image, (PIL.Image.Image, np.ndarray)):
        raise ImageInputError(
            f"convert_to_rgb takes a PIL image or a numpy array, got {type(image).__name__}"
            + ("; pass tensor.numpy()" if _is_tensor(image) else "")
        )
    if isinstance(image, PIL.Image.Image) and not return_numpy:
        return PIL.Image.fromarray(convert_to_rgb(image))
    if isinstance(image, PIL.Image.Image):
        if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
            raise ImageInputError(
                f"the image has mode {image.mode!r} (16/32-bit or float pixels), which cannot be converted to 8-bit "
                "RGB without choosing a scale; convert it yourself (e.g. to 'RGB' after scaling to 0..255)"
            )
        if "A" in image.getbands() or image.info.get("transparency") is not None:
            image = image.convert("RGBA")
            background = PIL.Image.new("RGBA", image.size, (255, 255, 255, 255))
            return np.array(PIL.Image.alpha_composite(background, image).convert("RGB"))
        return np.array(image.convert("RGB"))
    if input_data_format is None:
        input_data_format = infer_channel_dimension_format(image, num_channels=(1, 3, 4))
    axis = -1 if ChannelDimension(input_data_format) == ChannelDimension.LAST else 0
    image = np.moveaxis(image, axis, -1)
    channels = image.shape[-1]
    if channels == 1:
        rgb = np.repeat(image, 3, axis=-1)
    elif channels == 4:
        floating = np.issubdtype(image.dtype, np.floating)
        if floating and (image.min() < 0.0 or image.max() > 1.0):
            raise ImageInputError(
                f"the RGBA float image holds values in [{image.min()}, {image.max()}]; floats must lie in [0, 1]"
            )
        white = 1.0 if floating else 255
        alpha = image[..., 3:4] / white
        composite = alpha * image[..., :3] + (1 - alpha) * white
        rgb = composite.astype(image.dtype) if floating else np.round(composite).astype(image.dtype)
    else:
        rgb = image
    return np.moveaxis(rgb, -1, axis)

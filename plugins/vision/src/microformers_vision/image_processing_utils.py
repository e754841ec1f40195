"""``ImageProcessingMixin`` (``preprocessor_config.json`` I/O) and ``BaseImageProcessor`` (the preprocessing loop).

A subclass sets its defaults as class attributes (``size``, ``resample``, ``image_mean`` ...); any of them can be
overridden per instance (constructor or file) and per call (``processor(images, size=...)``). Each image goes:
to a channels-first numpy array -> RGB (when asked, or when the model wants 3 channels and the image is grey or
has alpha) -> resize -> center crop -> rescale -> normalize, in the reference implementation's order and numbers.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
import PIL.Image

from microformers.errors import ConfigError
from microformers_sdk.processing import BatchFeature, FeatureExtractionMixin, _json_ready

from .image_transforms import (
    center_crop,
    convert_to_rgb,
    get_resize_output_image_size,
    get_size_with_aspect_ratio,
    normalize,
    rescale,
    resize,
    to_channel_dimension_format,
)
from .image_utils import (
    ChannelDimension,
    ImageInputError,
    PILImageResampling,
    describe,
    get_image_size,
    infer_channel_dimension_format,
    make_flat_list_of_images,
)

__all__ = ["VALID_SIZE_DICT_KEYS", "BaseImageProcessor", "ImageProcessingMixin", "check_backend", "get_size_dict"]

VALID_SIZE_DICT_KEYS = (
    {"height", "width"},
    {"shortest_edge"},
    {"shortest_edge", "longest_edge"},
    {"longest_edge"},
    {"max_height", "max_width"},
)

# Modes whose pixels are not 8-bit: no conversion to RGB is right without choosing a scale.
_WIDE_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N", "F")


def get_size_dict(
    size: int | Iterable[int] | Mapping[str, int] | None = None,
    max_size: int | None = None,
    height_width_order: bool = True,
    default_to_square: bool = True,
    param_name: str = "size",
) -> dict[str, int]:
    """An int, ``(height, width)`` pair or dict -> a size dict with one of :data:`VALID_SIZE_DICT_KEYS`."""
    if isinstance(size, Mapping):
        size_dict = dict(size)
    elif isinstance(size, int) and not isinstance(size, bool):
        if default_to_square:
            if max_size is not None:
                raise ConfigError(f"{param_name}: an int size with default_to_square=True cannot take max_size")
            size_dict = {"height": size, "width": size}
        else:
            size_dict = {"shortest_edge": size}
            if max_size is not None:
                size_dict["longest_edge"] = max_size
    elif isinstance(size, (tuple, list)) and len(size) == 2:
        height, width = size if height_width_order else (size[1], size[0])
        size_dict = {"height": height, "width": width}
    elif size is None and max_size is not None and not default_to_square:
        size_dict = {"longest_edge": max_size}
    else:
        raise ConfigError(f"{param_name}={size!r}: pass an int, a (height, width) pair or a dict")
    if set(size_dict) not in VALID_SIZE_DICT_KEYS:
        raise ConfigError(
            f"{param_name} must have one of the key sets {[sorted(k) for k in VALID_SIZE_DICT_KEYS]}, "
            f"got {sorted(size_dict)}"
        )
    for key, value in size_dict.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ConfigError(f"{param_name}['{key}']={value!r} must be a positive integer")
    return size_dict


def check_backend(owner: str, use_fast: Any = None, backend: Any = None) -> None:
    """The reference's backend choice: microformers has one, Pillow (the reference's ``backend="pil"``, whose
    numbers it matches). ``use_fast=True`` gets it too, as the reference falls back to it where torchvision is
    not installed; ``backend="torchvision"`` (or any other) is refused."""
    if use_fast is not None and not isinstance(use_fast, bool):
        raise ConfigError(f"{owner}: use_fast={use_fast!r} must be True, False or None")
    if backend is not None and backend != "pil":
        raise ConfigError(
            f"{owner}: backend={backend!r} is not available; microformers' image processors are Pillow-based "
            "(the reference's backend='pil', same numbers). Leave backend out or pass backend='pil'"
        )


def _check_eight_bit(image: np.ndarray, rescale_factor: float) -> None:
    """A 16/32-bit integer array holding values over 255 would come out of the 8-bit ``rescale_factor`` (1/255)
    far outside [0, 1] (the reference lets it through, with no resize to stop it): refused, naming the fix."""
    if image.dtype.kind not in "iu" or image.dtype.itemsize == 1 or not math.isclose(rescale_factor, 1 / 255):
        return
    peak = int(image.max())
    if peak > 255:
        raise ImageInputError(
            f"it holds values up to {peak} ({image.dtype} pixels, a 16/32-bit image?) but rescale_factor=1/255 "
            "expects 0..255; scale it to 0..255 first, or pass the rescale_factor for its bit depth "
            "(e.g. 1/65535)"
        )


class ImageProcessingMixin(FeatureExtractionMixin):
    """``preprocessor_config.json`` <-> object, with ``image_processor_type`` naming the class."""

    model_input_names: ClassVar[list[str]] = ["pixel_values"]

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("image_processor_type", None)
        check_backend(type(self).__name__, kwargs.pop("use_fast", None), kwargs.pop("backend", None))
        super().__init__(**kwargs)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any], **kwargs: Any) -> Any:
        """As ``FeatureExtractionMixin.from_dict``; ``use_fast`` and ``backend`` are checked, not stored."""
        check_backend(cls.__name__, kwargs.pop("use_fast", None), kwargs.pop("backend", None))
        return super().from_dict(config, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data.pop("feature_extractor_type", None)
        data = {k: v for k, v in data.items() if v is not None}
        data["image_processor_type"] = type(self).__name__
        return data

    @classmethod
    def get_feature_extractor_dict(cls, pretrained: Any, **hub_kwargs: Any) -> dict[str, Any]:
        """``preprocessor_config.json``, else the ``image_processor`` entry of ``processor_config.json`` (where the
        reference's multimodal processors, CLIP's for one, nest the image settings)."""
        from microformers.configuration import read_json
        from microformers.errors import FileMissingError
        from microformers.hub import resolve_file
        from microformers_sdk.processing import PREPROCESSOR_NAME, PROCESSOR_NAME

        if resolve_file(pretrained, PREPROCESSOR_NAME, required=False, **hub_kwargs) is None:
            path = resolve_file(pretrained, PROCESSOR_NAME, required=False, **hub_kwargs)
            nested = read_json(path, what="processor configuration").get("image_processor") if path else None
            if isinstance(nested, dict):
                return nested
            if path is not None:
                raise FileMissingError(
                    f"{pretrained} has no {PREPROCESSOR_NAME} and its {PROCESSOR_NAME} has no 'image_processor' "
                    "entry; save the image processor with image_processor.save_pretrained(folder)"
                )
        return super().get_feature_extractor_dict(pretrained, **hub_kwargs)

    @classmethod
    def get_image_processor_dict(cls, pretrained: Any, **hub_kwargs: Any) -> dict[str, Any]:
        return cls.get_feature_extractor_dict(pretrained, **hub_kwargs)


class BaseImageProcessor(ImageProcessingMixin):
    """The preprocessing loop of an image processor; subclasses set the defaults as class attributes."""

    resample: ClassVar[int | None] = PILImageResampling.BILINEAR
    image_mean: ClassVar[Any] = None
    image_std: ClassVar[Any] = None
    size: ClassVar[dict[str, int] | None] = None
    default_to_square: ClassVar[bool] = True
    crop_size: ClassVar[dict[str, int] | None] = None
    do_resize: ClassVar[bool | None] = None
    do_center_crop: ClassVar[bool | None] = None
    do_rescale: ClassVar[bool | None] = None
    rescale_factor: ClassVar[float] = 1 / 255
    do_normalize: ClassVar[bool | None] = None
    do_convert_rgb: ClassVar[bool | None] = None

    _settings: ClassVar[tuple[str, ...]] = (
        "do_resize",
        "size",
        "resample",
        "do_center_crop",
        "crop_size",
        "do_rescale",
        "rescale_factor",
        "do_normalize",
        "image_mean",
        "image_std",
        "do_convert_rgb",
    )

    def __init__(self, **kwargs: Any) -> None:
        for name in self._settings:
            value = kwargs.pop(name, getattr(type(self), name))
            if name == "size" and value is not None:
                value = get_size_dict(value, default_to_square=self.default_to_square)
            elif name == "crop_size" and value is not None:
                value = get_size_dict(value, param_name="crop_size")
            elif name in ("image_mean", "image_std") and isinstance(value, tuple):
                value = list(value)
            elif name == "resample" and value is not None:
                value = int(value)
            setattr(self, name, copy.deepcopy(value))
        super().__init__(**kwargs)

    # -- the transforms, as methods so subclasses can replace one ----------------------------------
    def resize(
        self, image: np.ndarray, size: Mapping[str, int], resample: int | None = None, **kwargs: Any
    ) -> np.ndarray:
        if "height" in size and "width" in size:
            target = (size["height"], size["width"])
        elif "shortest_edge" in size and "longest_edge" in size:
            target = get_size_with_aspect_ratio(
                get_image_size(image, kwargs.get("input_data_format")), size["shortest_edge"], size["longest_edge"]
            )
        elif "shortest_edge" in size:
            target = get_resize_output_image_size(
                image,
                size["shortest_edge"],
                default_to_square=False,
                input_data_format=kwargs.get("input_data_format"),
            )
        else:
            raise ConfigError(f"size={dict(size)} is not supported by {type(self).__name__}; use height and width")
        return resize(image, target, resample=resample, **kwargs)

    def center_crop(self, image: np.ndarray, size: Mapping[str, int], **kwargs: Any) -> np.ndarray:
        if "height" not in size or "width" not in size:
            raise ConfigError(f"crop_size must have 'height' and 'width', got {sorted(size)}")
        return center_crop(image, (size["height"], size["width"]), **kwargs)

    def rescale(self, image: np.ndarray, scale: float, **kwargs: Any) -> np.ndarray:
        return rescale(image, scale, **kwargs)

    def normalize(self, image: np.ndarray, mean: Any, std: Any, **kwargs: Any) -> np.ndarray:
        return normalize(image, mean, std, **kwargs)

    # -- inputs ------------------------------------------------------------------------------------
    def _wants_three_channels(self, image_mean: Any) -> bool:
        return isinstance(image_mean, (list, tuple)) and len(image_mean) == 3

    def _to_channels_first(
        self, image: Any, do_convert_rgb: bool | None, three_channels: bool, input_data_format: Any
    ) -> np.ndarray:
        """One input -> ``(C, H, W)`` numpy array, converted to RGB when asked (or when needed, see the module doc)."""
        if isinstance(image, PIL.Image.Image):
            if 0 in image.size:
                raise ImageInputError("it has 0 pixels")
            if image.mode in _WIDE_MODES and do_convert_rgb is not False:
                raise ImageInputError(
                    f"it has mode {image.mode!r} (16/32-bit or float pixels), which the processor cannot map to 8-bit "
                    "RGB without choosing a scale; scale it to 0..255 and convert it to 'RGB' first"
                )
            if do_convert_rgb or (do_convert_rgb is None and three_channels and image.mode != "RGB"):
                return np.moveaxis(convert_to_rgb(image), -1, 0)
            array = np.array(image)
            return array[None] if array.ndim == 2 else np.moveaxis(array, -1, 0)
        if hasattr(image, "detach"):
            image = image.detach().cpu().numpy()
        if not isinstance(image, np.ndarray):
            raise ImageInputError("it is not an image")
        if image.ndim == 2:
            image, input_data_format = image[None], ChannelDimension.FIRST
        if image.ndim != 3:
            raise ImageInputError("an image array must have 2 or 3 dimensions")
        if input_data_format is None:
            input_data_format = infer_channel_dimension_format(image, num_channels=(1, 3, 4))
        if ChannelDimension(input_data_format) == ChannelDimension.LAST:
            image = np.moveaxis(image, -1, 0)
        if 0 in image.shape:
            raise ImageInputError("it has 0 pixels")
        if do_convert_rgb or (do_convert_rgb is None and three_channels and image.shape[0] in (1, 4)):
            image = convert_to_rgb(image, input_data_format=ChannelDimension.FIRST)
        return image

    # -- the loop ----------------------------------------------------------------------------------
    def __call__(self, images: Any, **kwargs: Any) -> BatchFeature:
        return self.preprocess(images, **kwargs)

    def preprocess(
        self,
        images: Any,
        do_resize: bool | None = None,
        size: Any = None,
        resample: int | None = None,
        do_center_crop: bool | None = None,
        crop_size: Any = None,
        do_rescale: bool | None = None,
        rescale_factor: float | None = None,
        do_normalize: bool | None = None,
        image_mean: Any = None,
        image_std: Any = None,
        do_convert_rgb: bool | None = None,
        return_tensors: str | None = None,
        data_format: ChannelDimension | str = ChannelDimension.FIRST,
        input_data_format: ChannelDimension | str | None = None,
    ) -> BatchFeature:
        """Images -> ``BatchFeature({"pixel_values": ...})``; arguments left as None take the processor's settings."""
        do_resize = self.do_resize if do_resize is None else do_resize
        size = self.size if size is None else get_size_dict(size, default_to_square=self.default_to_square)
        resample = self.resample if resample is None else resample
        do_center_crop = self.do_center_crop if do_center_crop is None else do_center_crop
        crop_size = self.crop_size if crop_size is None else get_size_dict(crop_size, param_name="crop_size")
        do_rescale = self.do_rescale if do_rescale is None else do_rescale
        rescale_factor = self.rescale_factor if rescale_factor is None else rescale_factor
        do_normalize = self.do_normalize if do_normalize is None else do_normalize
        image_mean = self.image_mean if image_mean is None else image_mean
        image_std = self.image_std if image_std is None else image_std
        do_convert_rgb = self.do_convert_rgb if do_convert_rgb is None else do_convert_rgb
        if do_resize and size is None:
            raise ConfigError(f"{type(self).__name__}: do_resize=True needs a size")
        if do_center_crop and crop_size is None:
            raise ConfigError(f"{type(self).__name__}: do_center_crop=True needs a crop_size")
        if do_normalize and (image_mean is None or image_std is None):
            raise ConfigError(f"{type(self).__name__}: do_normalize=True needs image_mean and image_std")
        three = self._wants_three_channels(image_mean) if do_normalize else True
        first = ChannelDimension.FIRST
        processed = []
        for index, original in enumerate(make_flat_list_of_images(images)):
            try:
                image = self._to_channels_first(original, do_convert_rgb, three, input_data_format)
                if do_rescale:
                    _check_eight_bit(image, rescale_factor)
                if do_resize:
                    image = self.resize(image, size, resample=resample, input_data_format=first)
                if do_center_crop:
                    image = self.center_crop(image, crop_size, input_data_format=first)
                if do_rescale:
                    image = self.rescale(image, rescale_factor, input_data_format=first)
                if do_normalize:
                    image = self.normalize(image, image_mean, image_std, input_data_format=first)
            except ImageInputError as exc:
                raise ImageInputError(f"image {index} ({describe(original)}): {exc}") from exc
            processed.append(to_channel_dimension_format(image, data_format, first))
        return BatchFeature(data={"pixel_values": processed}, tensor_type=return_tensors)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        for key in ("image_mean", "image_std"):
            if key in data:
                data[key] = _json_ready(data[key])
        return data

"""``microformers_vision.image_transforms`` and ``get_size_dict`` against the reference's functions of the same names.

Each function runs on the same inputs here and in the reference: uint8 and float images, channels last and first,
grey (one channel) and RGBA, one image and a 4-D batch, numpy arrays and (where the reference takes them) torch
tensors. Same shape and dtype, values within 1e-6; where the reference raises, we raise too (a clear
``ImageInputError``/``ConfigError`` where the reference's error is a bare ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch

from microformers_sdk.testing import assert_close
from microformers_vision import image_transforms as ours_module
from microformers_vision.image_processing_utils import get_size_dict

RNG = np.random.default_rng(0)
_HWC = RNG.integers(0, 256, (13, 17, 3), dtype=np.uint8)

IMAGES: dict[str, np.ndarray] = {
    "hwc_uint8": _HWC,
    "chw_uint8": np.ascontiguousarray(_HWC.transpose(2, 0, 1)),
    "hwc_float01": _HWC.astype(np.float32) / 255,
    "chw_float01": (_HWC.transpose(2, 0, 1) / 255).astype(np.float32),
    "hwc_float64_whole": _HWC.astype(np.float64),
    "grey_hw1": np.ascontiguousarray(_HWC[..., :1]),
    "grey_1hw": np.ascontiguousarray(_HWC[None, ..., 0]),
    "rgba_hwc": RNG.integers(0, 256, (13, 17, 4), dtype=np.uint8),
    "batch_bhwc": np.stack([_HWC, _HWC[::-1]]),
    "batch_bchw": np.ascontiguousarray(np.stack([_HWC, _HWC[::-1]]).transpose(0, 3, 1, 2)),
}


def _reference_module() -> Any:
    import transformers.image_transforms

    return transformers.image_transforms


def _outcome(call: Callable[[Any], Any], module: Any) -> tuple[str, Any]:
    try:
        return "ok", call(module)
    except Exception as exc:  # the reference raises ValueError/TypeError, we raise our own types
        return "error", exc


def _check(call: Callable[[Any], Any], what: str) -> None:
    want_kind, want = _outcome(call, _reference_module())
    got_kind, got = _outcome(call, ours_module)
    assert got_kind == want_kind, (
        f"{what}: the reference gave {want_kind} ({want!r:.200}), we gave {got_kind} ({got!r:.200})"
    )
    if want_kind == "error":
        return
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), what
        want, got = want.numpy(), got.numpy()
    want, got = np.asarray(want), np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: {got.shape} {got.dtype} != {want.shape} {want.dtype}"
    )
    if np.issubdtype(want.dtype, np.floating):
        assert_close(got, want, atol=1e-6, rtol=0.0, msg=what)
    else:  # uint8 pixels from the same Pillow filter on the same pixels: equal by construction
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("name", list(IMAGES))
def test_to_channel_dimension_format_matches_reference_on_arrays_and_tensors(name: str) -> None:
    image = IMAGES[name]
    for target in ("channels_first", "channels_last"):
        _check(lambda m, t=target: m.to_channel_dimension_format(image, t), f"{name} -> {target}")
        _check(
            lambda m, t=target: m.to_channel_dimension_format(torch.from_numpy(image), t), f"tensor {name} -> {target}"
        )


@pytest.mark.parametrize("name", list(IMAGES))
def test_rescale_and_normalize_match_reference(name: str) -> None:
    image = IMAGES[name]
    _check(lambda m: m.rescale(image, 1 / 255), f"rescale {name}")
    _check(lambda m: m.rescale(image, 0.5, data_format="channels_first"), f"rescale {name} to channels first")
    _check(lambda m: m.rescale(image, 2.0, dtype=np.float64), f"rescale {name} float64")
    channels = 4 if "rgba" in name else 1 if "grey" in name else 3
    floats = image.astype(np.float32)
    mean, std = [0.1, 0.2, 0.3, 0.4][:channels], [0.5, 0.6, 0.7, 0.8][:channels]
    _check(lambda m: m.normalize(floats, mean, std), f"normalize {name} per channel")
    _check(lambda m: m.normalize(floats, 0.5, 0.25), f"normalize {name} one value")
    _check(lambda m: m.normalize(image, 0.5, 0.25), f"normalize {name} as stored")
    _check(lambda m: m.normalize(image.astype(np.float64), 0.5, 0.25), f"normalize {name} float64")
    _check(lambda m: m.normalize(floats, [0.1, 0.2], [0.5, 0.6]), f"normalize {name} wrong channel count")


@pytest.mark.parametrize("name", list(IMAGES))
def test_resize_matches_reference_for_each_filter(name: str) -> None:
    image = IMAGES[name]
    for size in ((5, 7), (20, 31), (13, 17)):
        for resample in (None, PIL.Image.Resampling.BICUBIC, PIL.Image.Resampling.NEAREST):
            _check(lambda m, s=size, r=resample: m.resize(image, s, resample=r), f"resize {name} {size} {resample}")
        _check(lambda m, s=size: m.resize(image, s, data_format="channels_first"), f"resize {name} {size} to CHW")


@pytest.mark.parametrize("name", list(IMAGES))
def test_center_crop_matches_reference_inside_and_past_the_edges(name: str) -> None:
    image = IMAGES[name]
    for size in ((5, 7), (20, 31), (13, 17), (4, 30)):
        _check(lambda m, s=size: m.center_crop(image, s), f"center_crop {name} {size}")
        _check(lambda m, s=size: m.center_crop(image, s, data_format="channels_last"), f"center_crop {name} {size} HWC")


@pytest.mark.parametrize("name", list(IMAGES))
def test_pad_matches_reference_for_every_mode(name: str) -> None:
    image = IMAGES[name]
    for padding in (2, (1, 2), ((1, 2), (3, 4))):
        for mode in ("constant", "reflect", "replicate", "symmetric"):
            _check(lambda m, p=padding, md=mode: m.pad(image, p, mode=md), f"pad {name} {padding} {mode}")
        _check(lambda m, p=padding: m.pad(image, p, constant_values=5), f"pad {name} {padding} with 5")
        _check(lambda m, p=padding: m.pad(image, p, constant_values=((1, 2), (3, 4))), f"pad {name} {padding} per side")
    _check(lambda m: m.pad(torch.from_numpy(image), 1), f"pad tensor {name}")


def test_convert_to_rgb_matches_reference_for_pil_modes_and_rgba_arrays() -> None:
    rgba = RNG.integers(0, 256, (5, 6, 4), dtype=np.uint8)
    pil_rgb = PIL.Image.fromarray(_HWC)
    cases = {
        "pil_rgba": PIL.Image.fromarray(rgba),
        "pil_grey": pil_rgb.convert("L"),
        "pil_palette": pil_rgb.convert("P"),
        "pil_la": PIL.Image.fromarray(rgba).convert("LA"),
        "np_rgba": rgba,
        "np_rgb": _HWC,
    }
    for name, image in cases.items():
        _check(lambda m, i=image: np.asarray(m.convert_to_rgb(i, return_numpy=True)), f"convert_to_rgb {name}")
    pil = ours_module.convert_to_rgb(cases["pil_rgba"], return_numpy=False)
    assert isinstance(pil, PIL.Image.Image) and pil.mode == "RGB"


SIZE_ARGUMENTS: list[dict[str, Any]] = [
    {"size": 8},
    {"size": (8, 9)},
    {"size": [8, 9]},
    {"size": (8, 9), "height_width_order": False},
    {"size": 8, "default_to_square": False},
    {"size": 8, "max_size": 20, "default_to_square": False},
    {"size": None, "max_size": 10, "default_to_square": False},
    {"size": {"height": 3, "width": 4}},
    {"size": {"shortest_edge": 3}},
    {"size": {"shortest_edge": 3, "longest_edge": 9}},
    {"size": {"longest_edge": 5}},
    {"size": {"max_height": 3, "max_width": 4}},
]


@pytest.mark.parametrize("arguments", SIZE_ARGUMENTS, ids=lambda a: repr(a))
def test_get_size_dict_matches_reference(arguments: dict[str, Any]) -> None:
    from transformers.image_processing_utils import get_size_dict as reference_get_size_dict

    assert get_size_dict(**arguments) == dict(reference_get_size_dict(**arguments))


@pytest.mark.parametrize("size", [{"height": 3}, {"width": 3, "shortest_edge": 2}, "8", None])
def test_get_size_dict_refuses_what_the_reference_refuses(size: Any) -> None:
    from transformers.image_processing_utils import get_size_dict as reference_get_size_dict

    from microformers import ConfigError

    with pytest.raises(ValueError):
        reference_get_size_dict(size)
    with pytest.raises(ConfigError, match="size"):
        get_size_dict(size)


def test_get_size_dict_refuses_three_numbers_the_reference_cuts_to_two() -> None:
    from transformers.image_processing_utils import get_size_dict as reference_get_size_dict

    from microformers import ConfigError

    assert dict(reference_get_size_dict((1, 2, 3))) == {"height": 1, "width": 2}  # the 3 is dropped silently
    with pytest.raises(ConfigError, match=r"size=\(1, 2, 3\)"):
        get_size_dict((1, 2, 3))

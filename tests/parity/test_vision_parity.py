"""Image processors against the reference's PIL-backed ViT image processor: pixel_values within 1e-6."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch

from microformers import AutoImageProcessor
from microformers_vision import ViTImageProcessor

RNG = np.random.default_rng(0)


def _reference(**kwargs: object) -> object:
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    return ViTImageProcessorPil(**kwargs)


def _images() -> dict[str, object]:
    rgb = RNG.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    small = RNG.integers(0, 256, (9, 7, 3), dtype=np.uint8)
    return {
        "pil_rgb": PIL.Image.fromarray(rgb),
        "pil_small": PIL.Image.fromarray(small),
        "np_hwc": rgb,
        "np_chw": np.ascontiguousarray(rgb.transpose(2, 0, 1)),
        "np_float01": rgb.astype(np.float32) / 255.0,
        "torch_chw": torch.from_numpy(np.ascontiguousarray(rgb.transpose(2, 0, 1))),
        "np_batch": np.stack([rgb, rgb[::-1]]),
        "torch_batch_bhwc": torch.from_numpy(np.stack([rgb, rgb[::-1]])),
        "torch_float_chw": torch.from_numpy(np.ascontiguousarray(rgb.transpose(2, 0, 1)) / 255.0).float(),
        "nested_lists": [[PIL.Image.fromarray(rgb)], [rgb[::-1]]],
        "list_mixed": [PIL.Image.fromarray(small), rgb],
    }


def _converted_images() -> dict[str, object]:
    rgb = RNG.integers(0, 256, (31, 45, 3), dtype=np.uint8)
    rgba = RNG.integers(0, 256, (31, 45, 4), dtype=np.uint8)
    palette = PIL.Image.fromarray(rgb).convert("P")
    return {
        "pil_grey": PIL.Image.fromarray(rgb[..., 0]),
        "pil_rgba": PIL.Image.fromarray(rgba),
        "pil_la": PIL.Image.fromarray(rgba).convert("LA"),
        "pil_palette": palette,
        "np_grey_hw1": rgb[..., :1],
        "np_rgba": rgba,
        "np_rgba_chw": np.ascontiguousarray(rgba.transpose(2, 0, 1)),
    }


SETTINGS = [
    {"size": {"height": 32, "width": 32}},
    {"size": {"height": 24, "width": 40}, "resample": PIL.Image.Resampling.BICUBIC},
    {"size": {"height": 16, "width": 16}, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]},
    {"size": {"height": 20, "width": 20}, "do_normalize": False},
    {"size": {"height": 20, "width": 20}, "do_resize": False, "do_rescale": False},
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_vit_processor_matches_reference(settings: dict) -> None:
    ours, theirs = ViTImageProcessor(**settings), _reference(**settings)
    for name, image in _images().items():
        if not settings.get("do_resize", True) and name in ("list_mixed",):
            continue
        got = ours(image, return_tensors="np")["pixel_values"]
        want = theirs(image, return_tensors="np")["pixel_values"]
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0, err_msg=name)


@pytest.mark.parametrize("do_convert_rgb", [True, None])
def test_grey_rgba_palette_converted_as_reference(do_convert_rgb: bool | None) -> None:
    settings = {"size": {"height": 24, "width": 24}}
    ours = ViTImageProcessor(**settings, do_convert_rgb=do_convert_rgb)
    theirs = _reference(**settings, do_convert_rgb=True)
    for name, image in _converted_images().items():
        got = ours(image, return_tensors="np")["pixel_values"]
        want = theirs(image, return_tensors="np")["pixel_values"]
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0, err_msg=name)


def test_processor_files_load_both_ways(tmp_path: Path) -> None:
    settings = {"size": {"height": 28, "width": 20}, "image_mean": [0.3, 0.4, 0.5], "resample": 3}
    _reference(**settings).save_pretrained(tmp_path / "theirs")
    ours = AutoImageProcessor.from_pretrained(tmp_path / "theirs")
    assert isinstance(ours, ViTImageProcessor)
    ViTImageProcessor(**settings).save_pretrained(tmp_path / "ours")
    from transformers import AutoImageProcessor as ReferenceAuto

    theirs = ReferenceAuto.from_pretrained(tmp_path / "ours", backend="pil")
    ours_json = json.loads((tmp_path / "ours" / "preprocessor_config.json").read_text())
    assert ours_json["image_processor_type"] == "ViTImageProcessor"
    image = RNG.integers(0, 256, (30, 30, 3), dtype=np.uint8)
    got = ours(image, return_tensors="np")["pixel_values"]
    np.testing.assert_allclose(got, theirs(image, return_tensors="np")["pixel_values"], atol=1e-6, rtol=0)


BIT_SETTINGS = [
    {},
    {"size": {"shortest_edge": 20}, "crop_size": {"height": 16, "width": 18}},
    {"size": {"shortest_edge": 40}, "crop_size": {"height": 48, "width": 48}},  # crop larger than the image: padded
    {"size": {"shortest_edge": 24}, "do_center_crop": False},
]


@pytest.mark.parametrize("settings", BIT_SETTINGS)
def test_bit_processor_matches_reference(settings: dict) -> None:
    from transformers.models.bit.image_processing_pil_bit import BitImageProcessorPil

    from microformers_vision import BitImageProcessor

    ours, theirs = BitImageProcessor(**settings), BitImageProcessorPil(**settings)
    images = {**_images(), **_converted_images()}
    for name, image in images.items():
        if settings.get("do_center_crop") is False and name in ("np_batch", "list_mixed"):
            continue  # different output sizes cannot stack
        got = ours(image, return_tensors="np")["pixel_values"]
        want = theirs(image, return_tensors="np")["pixel_values"]
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0, err_msg=name)


def test_bit_processor_files_both_ways(tmp_path: Path) -> None:
    from transformers import AutoImageProcessor as ReferenceAuto
    from transformers.models.bit.image_processing_pil_bit import BitImageProcessorPil

    from microformers_vision import BitImageProcessor

    BitImageProcessorPil(size={"shortest_edge": 30}).save_pretrained(tmp_path / "theirs")
    ours = AutoImageProcessor.from_pretrained(tmp_path / "theirs")
    assert isinstance(ours, BitImageProcessor) and ours.size == {"shortest_edge": 30}
    BitImageProcessor(crop_size={"height": 20, "width": 20}).save_pretrained(tmp_path / "ours")
    theirs = ReferenceAuto.from_pretrained(tmp_path / "ours", backend="pil")
    assert dict(theirs.crop_size) == {"height": 20, "width": 20}


def test_shortest_and_longest_edge_resize_matches_reference() -> None:
    from transformers.models.bit.image_processing_pil_bit import BitImageProcessorPil

    from microformers_vision import BitImageProcessor

    settings = {"size": {"shortest_edge": 20, "longest_edge": 30}, "do_center_crop": False}
    ours, theirs = BitImageProcessor(**settings), BitImageProcessorPil(**settings)
    for shape in ((37, 53, 3), (53, 37, 3), (20, 25, 3), (10, 60, 3)):
        image = RNG.integers(0, 256, shape, dtype=np.uint8)
        got = ours(image, return_tensors="np")["pixel_values"]
        want = theirs(image, return_tensors="np")["pixel_values"]
        assert got.shape == want.shape, shape
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "settings", [{}, {"size": {"height": 30, "width": 26}, "crop_size": {"height": 20, "width": 24}}]
)
def test_deit_processor_matches_reference(settings: dict) -> None:
    from transformers.models.deit.image_processing_pil_deit import DeiTImageProcessorPil

    from microformers_vision import DeiTImageProcessor

    ours, theirs = DeiTImageProcessor(**settings), DeiTImageProcessorPil(**settings)
    for name, image in _images().items():
        got = ours(image, return_tensors="np")["pixel_values"]
        want = theirs(image, return_tensors="np")["pixel_values"]
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0, err_msg=name)

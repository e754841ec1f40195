from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch

from microformers import AutoImageProcessor, FileMissingError
from microformers_vision import (
    ImageInputError,
    ViTImageProcessor,
    center_crop,
    normalize,
    pad,
    rescale,
    resize,
    to_channel_dimension_format,
)
from microformers_vision.image_processing_utils import get_size_dict
from microformers_vision.image_utils import load_image

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, (40, 50, 3), dtype=np.uint8)


def test_transforms_shapes_and_values() -> None:
    chw = to_channel_dimension_format(RGB, "channels_first")
    assert chw.shape == (3, 40, 50)
    assert resize(RGB, (20, 30)).shape == (20, 30, 3)
    assert resize(chw, (20, 30)).shape == (3, 20, 30)
    assert resize(RGB / 255.0, (20, 30)).max() <= 1.0
    assert rescale(RGB, 1 / 255).dtype == np.float32
    out = normalize(rescale(chw, 1 / 255), [0.5] * 3, [0.5] * 3)
    assert out.min() >= -1.0 and out.max() <= 1.0
    assert center_crop(chw, (10, 12)).shape == (3, 10, 12)
    assert center_crop(chw, (60, 60)).shape == (3, 60, 60)
    assert pad(chw, ((1, 2), (3, 4))).shape == (3, 43, 57)
    assert get_size_dict(8) == {"height": 8, "width": 8}
    assert get_size_dict((8, 9)) == {"height": 8, "width": 9}
    assert get_size_dict(8, default_to_square=False) == {"shortest_edge": 8}


def test_processor_inputs_agree() -> None:
    proc = ViTImageProcessor(size={"height": 16, "width": 16})
    want = proc(PIL.Image.fromarray(RGB), return_tensors="np")["pixel_values"]
    assert want.shape == (1, 3, 16, 16) and want.dtype == np.float32
    for image in (RGB, RGB.transpose(2, 0, 1), torch.from_numpy(RGB.copy()), [RGB], np.stack([RGB])):
        np.testing.assert_allclose(proc(image, return_tensors="np")["pixel_values"], want, atol=1e-6)
    batch = proc([RGB, RGB[:20]], return_tensors="pt")["pixel_values"]
    assert batch.shape == (2, 3, 16, 16)
    for grey in (PIL.Image.fromarray(RGB[..., 0]), RGB[..., 0], RGB[..., :1]):
        out = proc(grey, return_tensors="np")["pixel_values"]
        assert out.shape == (1, 3, 16, 16)
        np.testing.assert_allclose(out[0, 0], out[0, 1])
    rgba = RNG.integers(0, 256, (40, 50, 4), dtype=np.uint8)
    assert proc(PIL.Image.fromarray(rgba), return_tensors="np")["pixel_values"].shape == (1, 3, 16, 16)
    assert proc(rgba, return_tensors="np")["pixel_values"].shape == (1, 3, 16, 16)


def test_processor_bad_inputs_name_the_input(tmp_path: Path) -> None:
    proc = ViTImageProcessor(size={"height": 16, "width": 16})
    with pytest.raises(ImageInputError, match="image 0 .*0 pixels"):
        proc(np.zeros((0, 5, 3), np.uint8))
    with pytest.raises(ImageInputError, match="0 pixels"):
        proc(PIL.Image.new("RGB", (0, 4)))
    with pytest.raises(ImageInputError, match="mode 'I;16'"):
        proc(PIL.Image.fromarray(np.full((8, 8), 1000, np.uint16)))
    with pytest.raises(ImageInputError, match="channel axis"):
        proc(np.zeros((5, 6, 7), np.uint8))
    with pytest.raises(ImageInputError, match="cannot read"):
        proc([object()])
    with pytest.raises(ImageInputError, match="empty list"):
        proc([])
    truncated = tmp_path / "cut.png"
    buffer = io.BytesIO()
    PIL.Image.fromarray(RGB).save(buffer, format="PNG")
    truncated.write_bytes(buffer.getvalue()[:60])
    with pytest.raises(ImageInputError, match="cut.png"):
        load_image(truncated)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ImageInputError, match="notes.txt"):
        load_image(str(text))
    with pytest.raises(FileMissingError, match="missing.png"):
        load_image(str(tmp_path / "missing.png"))
    with pytest.raises(ImageInputError, match="URL"):
        load_image("https://example.com/cat.png")
    assert load_image(buffer.getvalue()).size == (50, 40)


def test_processor_files_and_auto(tmp_path: Path) -> None:
    proc = ViTImageProcessor(size={"height": 20, "width": 24}, image_mean=[0.4, 0.5, 0.6], custom_key=3)
    proc.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert data["image_processor_type"] == "ViTImageProcessor" and data["resample"] == 2
    assert data["custom_key"] == 3 and "feature_extractor_type" not in data
    loaded = AutoImageProcessor.from_pretrained(tmp_path)
    assert isinstance(loaded, ViTImageProcessor) and loaded.to_dict() == proc.to_dict()
    np.testing.assert_array_equal(
        loaded(RGB, return_tensors="np")["pixel_values"], proc(RGB, return_tensors="np")["pixel_values"]
    )
    fallback = tmp_path / "by_type"
    fallback.mkdir()
    (fallback / "config.json").write_text(json.dumps({"model_type": "vit"}))
    (fallback / "preprocessor_config.json").write_text(json.dumps({"size": {"height": 8, "width": 8}}))
    assert AutoImageProcessor.from_pretrained(fallback).size == {"height": 8, "width": 8}
    with pytest.raises(Exception, match="size"):
        ViTImageProcessor(size={"height": 8})


def test_bit_processor_crops_and_is_dinov2_fallback(tmp_path: Path) -> None:
    from microformers_vision import BitImageProcessor

    proc = BitImageProcessor(size={"shortest_edge": 20}, crop_size={"height": 16, "width": 18})
    assert proc(RGB, return_tensors="np")["pixel_values"].shape == (1, 3, 16, 18)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "dinov2"}))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"crop_size": {"height": 8, "width": 8}}))
    loaded = AutoImageProcessor.from_pretrained(tmp_path)
    assert isinstance(loaded, BitImageProcessor) and loaded.crop_size == {"height": 8, "width": 8}


def test_decompression_bomb_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.png"
    PIL.Image.fromarray(RGB).save(path)
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(ImageInputError, match="big.png.*too large"):
        load_image(path)


def test_data_urls_load_and_bad_ones_are_clear() -> None:
    import base64

    buffer = io.BytesIO()
    PIL.Image.fromarray(RGB).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    assert load_image(url).size == (50, 40)
    with pytest.raises(ImageInputError, match="base64"):
        load_image("data:image/png;base64,@@@")
    with pytest.raises(ImageInputError, match="data URL"):
        load_image("data:image/png;base64," + base64.b64encode(b"not a png").decode())


def test_resize_takes_pil_images_and_tensors_as_their_arrays() -> None:
    from microformers_sdk.testing import assert_close

    chw = to_channel_dimension_format(RGB, "channels_first")
    from_array = resize(RGB, (20, 30))
    # the same uint8 pixels through the same Pillow filter: equal by construction
    np.testing.assert_array_equal(resize(PIL.Image.fromarray(RGB), (20, 30)), from_array)
    np.testing.assert_array_equal(resize(torch.from_numpy(chw.copy()), (20, 30)), resize(chw, (20, 30)))
    floats = torch.from_numpy(RGB.astype(np.float32) / 255)
    assert_close(resize(floats, (20, 30)), resize(floats.numpy(), (20, 30)), atol=1e-6, rtol=0.0)
    assert resize(PIL.Image.fromarray(RGB), (20, 30), return_numpy=False).size == (30, 20)
    with pytest.raises(ImageInputError, match="resize takes"):
        resize([[1, 2], [3, 4]], (2, 2))


def test_transforms_refuse_what_they_cannot_read_by_name() -> None:
    from microformers_vision import convert_to_rgb

    with pytest.raises(ImageInputError, match="pad takes a numpy array or torch tensor, got Image"):
        pad(PIL.Image.fromarray(RGB), 1)
    with pytest.raises(ImageInputError, match="convert_to_rgb takes .*Tensor; pass tensor.numpy"):
        convert_to_rgb(torch.from_numpy(RGB.copy()))
    with pytest.raises(ImageInputError, match="normalize takes a numpy array, got Tensor"):
        normalize(torch.zeros(3, 4, 4), 0.5, 0.5)
    rgba = PIL.Image.fromarray(RNG.integers(0, 256, (5, 6, 4), dtype=np.uint8))
    as_pil = convert_to_rgb(rgba, return_numpy=False)
    assert isinstance(as_pil, PIL.Image.Image) and as_pil.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(as_pil), convert_to_rgb(rgba))


def test_use_fast_and_backend_are_checked_not_stored(tmp_path: Path) -> None:
    from microformers import ConfigError

    ViTImageProcessor(size={"height": 8, "width": 8}).save_pretrained(tmp_path)
    for options in ({"use_fast": True}, {"use_fast": False}, {"backend": "pil"}):
        loaded = AutoImageProcessor.from_pretrained(tmp_path, **options)
        assert isinstance(loaded, ViTImageProcessor) and loaded.size == {"height": 8, "width": 8}
        assert "backend" not in loaded.to_dict() and "use_fast" not in loaded.to_dict()
    with pytest.raises(ConfigError, match="backend='torchvision'.*Pillow"):
        AutoImageProcessor.from_pretrained(tmp_path, backend="torchvision")
    with pytest.raises(ConfigError, match="backend='torchvision'"):
        ViTImageProcessor.from_pretrained(tmp_path, backend="torchvision")
    with pytest.raises(ConfigError, match="use_fast='yes'"):
        AutoImageProcessor.from_pretrained(tmp_path, use_fast="yes")
    with pytest.raises(ConfigError, match="use_fast=1"):
        ViTImageProcessor.from_pretrained(tmp_path, use_fast=1)


def test_a_folder_given_as_an_image_is_named(tmp_path: Path) -> None:
    with pytest.raises(ImageInputError, match="is a folder, not an image file"):
        load_image(tmp_path)


def test_sixteen_bit_arrays_are_refused_rather_than_rescaled_out_of_range() -> None:
    proc = ViTImageProcessor(size={"height": 8, "width": 8})
    wide = np.full((10, 10, 3), 40000, np.uint16)
    for options in ({}, {"do_resize": False}):  # without a resize nothing else would stop it
        with pytest.raises(ImageInputError, match=r"image 0 .*uint16.*up to 40000.*rescale_factor"):
            proc(wide, **options)
    with pytest.raises(ImageInputError, match="up to 40000"):
        proc(torch.from_numpy(wide.astype(np.int32)).permute(2, 0, 1), do_resize=False)
    # 16-bit storage of 8-bit values, or the rescale factor for 16 bits, is fine
    narrow = proc(wide.astype(np.uint16) // 200, do_resize=False, return_tensors="np")["pixel_values"]
    assert narrow.max() <= 1.0
    scaled = proc(wide, do_resize=False, rescale_factor=1 / 65535, do_normalize=False, return_tensors="np")
    assert 0.0 < scaled["pixel_values"].max() <= 1.0

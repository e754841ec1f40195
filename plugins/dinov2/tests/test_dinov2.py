from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoModel, AutoModelForImageClassification, ConfigError
from microformers_dinov2 import Dinov2Config, Dinov2ForImageClassification, Dinov2Model
from microformers_sdk.testing import ModelConformanceTests, checks

TINY: dict[str, Any] = {
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "mlp_ratio": 2,
    "image_size": 8,
    "patch_size": 4,
    "num_labels": 3,
}


def _pixels(batch: int, height: int = 8, width: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


class _ImageInputs:
    test_padding_invariance = None  # images have no padding

    def make_inputs(self, config: Any) -> dict[str, torch.Tensor]:
        return {"pixel_values": _pixels(3)}

    def make_labels(self, model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"labels": torch.tensor([0, 2, 1])} if isinstance(model, Dinov2ForImageClassification) else {}

    def test_batch_matches_single(self, model_class: type) -> None:
        _, model, inputs = self._setup(model_class)  # type: ignore[attr-defined]
        with torch.no_grad():
            batched = checks.main_outputs(model(**inputs))
            for row in range(3):
                alone = checks.main_outputs(model(pixel_values=inputs["pixel_values"][row : row + 1]))
                for name, value in alone.items():
                    torch.testing.assert_close(batched[name][row : row + 1], value, atol=1e-5, rtol=1e-5)


class TestDinov2Conformance(_ImageInputs, ModelConformanceTests):
    config_class = Dinov2Config
    config_kwargs = TINY
    model_classes = (Dinov2Model, Dinov2ForImageClassification)
    # The mask token is used only with bool_masked_pos (pre-training).
    parameters_without_gradient = (r"embeddings\.mask_token$",)


class TestDinov2SwiGLUConformance(_ImageInputs, ModelConformanceTests):
    config_class = Dinov2Config
    config_kwargs = {**TINY, "use_swiglu_ffn": True, "layerscale_value": 0.1}
    model_classes = (Dinov2ForImageClassification,)
    parameters_without_gradient = (r"embeddings\.mask_token$",)


def test_auto_classes_config_checks_and_drop_path(tmp_path: Path) -> None:
    Dinov2ForImageClassification(Dinov2Config(**TINY)).save_pretrained(tmp_path)
    assert isinstance(AutoModelForImageClassification.from_pretrained(tmp_path), Dinov2ForImageClassification)
    assert isinstance(AutoModel.from_pretrained(tmp_path), Dinov2Model)
    with pytest.raises(ConfigError, match="mlp_ratio"):
        Dinov2Config(**{**TINY, "mlp_ratio": 0})
    with pytest.raises(ConfigError, match="drop_path_rate"):
        Dinov2Config(**{**TINY, "drop_path_rate": 1.5})
    model = Dinov2Model(Dinov2Config(**{**TINY, "drop_path_rate": 0.5}))
    pixels = _pixels(4, 12, 16)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(pixels).last_hidden_state, model(pixels).last_hidden_state)
    assert model(pixels).last_hidden_state.shape == (4, 1 + 3 * 4, 16)


def test_bad_pixel_values_are_clear_errors_and_large_images_interpolate() -> None:
    from microformers_vit import ViTInputError

    config = Dinov2Config(**{**TINY, "num_hidden_layers": 1})
    model = Dinov2Model(config).eval()
    with pytest.raises(ViTInputError, match=r"shape \(3, 8, 8\).*\(batch, channels, height, width\)"):
        model(torch.randn(3, 8, 8))
    with pytest.raises(ViTInputError, match="1 channels.*num_channels=3"):
        model(torch.randn(1, 1, 8, 8))
    with pytest.raises(ViTInputError, match="smaller than one patch"):
        model(torch.randn(1, 3, 2, 2))
    with torch.no_grad():  # DINOv2 always interpolates its positions: an image far over its size is a longer sequence
        out = model(torch.randn(1, 3, 64, 48))
    patch = config.patch_size
    assert out.last_hidden_state.shape == (1, 1 + (64 // patch) * (48 // patch), config.hidden_size)

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoConfig, AutoModel, AutoModelForImageClassification, ConfigError
from microformers_sdk.testing import ModelConformanceTests, assert_close, checks
from microformers_vit import ViTConfig, ViTForImageClassification, ViTInputError, ViTModel

TINY: dict[str, Any] = {
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 24,
    "image_size": 8,
    "patch_size": 4,
    "num_labels": 3,
}


def _pixels(batch: int, height: int = 8, width: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


class TestViTConformance(ModelConformanceTests):
    config_class = ViTConfig
    config_kwargs = TINY
    model_classes = (ViTModel, ViTForImageClassification)
    test_padding_invariance = None  # images have no padding

    def make_inputs(self, config: Any) -> dict[str, torch.Tensor]:
        return {"pixel_values": _pixels(3)}

    def make_labels(self, model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"labels": torch.tensor([0, 2, 1])} if isinstance(model, ViTForImageClassification) else {}

    def test_batch_matches_single(self, model_class: type) -> None:
        _, model, inputs = self._setup(model_class)
        with torch.no_grad():
            batched = checks.main_outputs(model(**inputs))
            for row in range(3):
                alone = checks.main_outputs(model(pixel_values=inputs["pixel_values"][row : row + 1]))
                for name, value in alone.items():
                    torch.testing.assert_close(batched[name][row : row + 1], value, atol=1e-5, rtol=1e-5)


def test_auto_classes_and_config_checks(tmp_path: Path) -> None:
    config = ViTConfig(**TINY)
    ViTForImageClassification(config).save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), ViTConfig)
    assert isinstance(AutoModelForImageClassification.from_pretrained(tmp_path), ViTForImageClassification)
    base = AutoModel.from_pretrained(tmp_path)  # the classifier's file has no pooler: initialised, no error
    assert isinstance(base, ViTModel) and base.pooler is not None
    with pytest.raises(ConfigError, match="patch_size"):
        ViTConfig(**{**TINY, "patch_size": 0})
    with pytest.raises(ConfigError, match="num_attention_heads"):
        ViTConfig(**{**TINY, "num_attention_heads": 3})


def test_bad_pixel_values_are_clear_errors() -> None:
    model = ViTModel(ViTConfig(**TINY)).eval()
    with pytest.raises(ViTInputError, match="channels"):
        model(torch.randn(1, 1, 8, 8))
    with pytest.raises(ViTInputError, match="interpolate_pos_encoding"):
        model(torch.randn(1, 3, 12, 12))
    with pytest.raises(ViTInputError, match="smaller than one patch"):
        model(torch.randn(1, 3, 2, 2), interpolate_pos_encoding=True)
    with pytest.raises(ViTInputError, match="pixel_values"):
        model()
    out = model(torch.randn(2, 3, 12, 16), interpolate_pos_encoding=True)
    assert out.last_hidden_state.shape == (2, 1 + 3 * 4, 16)


def test_mask_token_and_tuple_outputs() -> None:
    model = ViTModel(ViTConfig(**TINY), use_mask_token=True).eval()
    pixels = _pixels(1)
    masked = torch.zeros(1, 4, dtype=torch.bool)
    with torch.no_grad():
        plain = model(pixels).last_hidden_state
        same = model(pixels, bool_masked_pos=masked).last_hidden_state
        tuple_out = model(pixels, return_dict=False)
    torch.testing.assert_close(plain, same)
    assert isinstance(tuple_out, tuple) and torch.equal(tuple_out[0], plain)


class TestDeiTConformance(TestViTConformance):
    from microformers_vit import DeiTConfig, DeiTForImageClassification, DeiTModel

    config_class = DeiTConfig
    model_classes = (DeiTModel, DeiTForImageClassification)

    def make_labels(self, model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"labels": torch.tensor([0, 2, 1])} if "ForImageClassification" in type(model).__name__ else {}


@pytest.mark.parametrize("head", ["vit", "deit", "deit_with_teacher"])
def test_classifiers_compute_only_the_rows_they_read_in_the_last_layer(head: str) -> None:
    from microformers_vit import DeiTConfig, DeiTForImageClassification, DeiTForImageClassificationWithTeacher

    torch.manual_seed(0)
    classes = {
        "vit": (ViTConfig, ViTForImageClassification, 1, 1),
        "deit": (DeiTConfig, DeiTForImageClassification, 1, 2),  # [CLS] and the distillation token
        "deit_with_teacher": (DeiTConfig, DeiTForImageClassificationWithTeacher, 2, 2),
    }
    config_class, model_class, rows, prefix = classes[head]
    model = model_class(config_class(**{**TINY, "num_hidden_layers": 3})).eval()
    base = model.base_model
    widths: list[int] = []
    base.encoder.layer[-1].intermediate.dense.register_forward_hook(lambda m, i, o: widths.append(i[0].shape[1]))
    pixels = _pixels(4, seed=1)
    with torch.no_grad():
        short = model(pixel_values=pixels).logits
        # asking for the hidden states runs every row of every layer: the classifier's rows must not change
        full = model(pixel_values=pixels, output_hidden_states=True)
    assert widths == [rows, prefix + 4]  # the short path's last layer ran only the rows the heads read
    assert_close(short, full.logits)
    # the same through ViTModel: only the first rows come out of it
    with torch.no_grad():
        last = base(pixel_values=pixels, _last_layer_rows=rows).last_hidden_state
        assert_close(last, base(pixel_values=pixels).last_hidden_state[:, :rows])
    assert last.shape[1] == rows

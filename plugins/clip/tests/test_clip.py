"""CLIP and SigLIP without the reference: the SDK's model conformance kit on the towers and classifiers, the
two-tower forward (losses fall when trained, gradient checkpointing, errors), configs and tokenizer checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoConfig, AutoModel, ConfigError
from microformers.errors import InputError
from microformers_clip import (
    CLIPConfig,
    CLIPForImageClassification,
    CLIPModel,
    CLIPTextConfig,
    CLIPTextModel,
    CLIPTextModelWithProjection,
    CLIPVisionConfig,
    CLIPVisionModel,
    CLIPVisionModelWithProjection,
    SiglipConfig,
    SiglipForImageClassification,
    SiglipModel,
    SiglipVisionConfig,
    SiglipVisionModel,
)
from microformers_sdk.testing import ModelConformanceTests, checks

TEXT: dict[str, Any] = {
    "vocab_size": 50,
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "max_position_embeddings": 12,
    "bos_token_id": 48,
    "eos_token_id": 49,
    "projection_dim": 8,
}
VISION: dict[str, Any] = {
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "image_size": 8,
    "patch_size": 4,
    "projection_dim": 8,
}


def _pixels(batch: int, size: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _ids(batch: int, length: int = 7, seed: int = 0) -> torch.Tensor:
    ids = torch.randint(0, 48, (batch, length), generator=torch.Generator().manual_seed(seed))
    ids[:, -1] = TEXT["eos_token_id"]
    return ids


class _ImageConformance(ModelConformanceTests):
    test_padding_invariance = None  # images have no padding

    def make_inputs(self, config: Any) -> dict[str, torch.Tensor]:
        return {"pixel_values": _pixels(3)}

    def test_batch_matches_single(self, model_class: type) -> None:
        _, model, inputs = self._setup(model_class)
        with torch.no_grad():
            batched = checks.main_outputs(model(**inputs))
            for row in range(3):
                alone = checks.main_outputs(model(pixel_values=inputs["pixel_values"][row : row + 1]))
                for name, value in alone.items():
                    torch.testing.assert_close(batched[name][row : row + 1], value, atol=1e-5, rtol=1e-5)


class TestCLIPVisionConformance(_ImageConformance):
    config_class = CLIPVisionConfig
    config_kwargs = VISION
    model_classes = (CLIPVisionModel, CLIPVisionModelWithProjection)


class TestSiglipVisionConformance(_ImageConformance):
    config_class = SiglipVisionConfig
    config_kwargs = {k: v for k, v in VISION.items() if k != "projection_dim"}
    model_classes = (SiglipVisionModel,)


class TestCLIPTextConformance(ModelConformanceTests):
    config_class = CLIPTextConfig
    config_kwargs = TEXT
    model_classes = (CLIPTextModel, CLIPTextModelWithProjection)
    test_padding_invariance = None  # pooled at the end-of-text token, which right padding keeps in place

    def make_inputs(self, config: Any) -> dict[str, torch.Tensor]:
        ids = _ids(3)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class TestClassifierConformance(_ImageConformance):
    config_class = CLIPConfig
    config_kwargs = {"text_config": TEXT, "vision_config": VISION, "projection_dim": 8, "num_labels": 3}
    model_classes = (CLIPForImageClassification,)
    # the classifier averages the patch tokens' states; the tower's pooler (post_layernorm) is not on its path
    parameters_without_gradient = ("vision_model.post_layernorm.weight", "vision_model.post_layernorm.bias")

    def make_labels(self, model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"labels": torch.tensor([0, 2, 1])}


class TestSiglipClassifierConformance(TestClassifierConformance):
    config_class = SiglipConfig
    config_kwargs = {"text_config": {**TEXT, "projection_size": 16}, "vision_config": VISION, "num_labels": 3}
    model_classes = (SiglipForImageClassification,)
    # the classifier averages all tokens' states; the attention-pooling head is not on its path
    parameters_without_gradient = ("vision_model.head.",)


@pytest.mark.parametrize(("model_class", "config"), [
    # wider initial weights than CLIP's default, so the embeddings start apart and a few steps show the fall
    (CLIPModel, CLIPConfig(text_config={**TEXT, "initializer_range": 0.2}, vision_config={**VISION,
                           "initializer_range": 0.2}, projection_dim=8)),
    (SiglipModel, SiglipConfig(text_config={**TEXT, "projection_size": 16}, vision_config=VISION)),
])  # fmt: skip
def test_two_tower_training_lowers_the_loss(model_class: type, config: Any) -> None:
    torch.manual_seed(0)
    model = model_class(config).train()
    model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids, pixels = _ids(4, seed=1), _pixels(4, seed=1)
    losses = []
    for _ in range(8):
        loss = model(input_ids=ids, pixel_values=pixels, return_loss=True).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.8, losses


def test_logits_are_scaled_cosine_similarities() -> None:
    model = CLIPModel(CLIPConfig(text_config=TEXT, vision_config=VISION, projection_dim=8)).eval()
    with torch.no_grad():
        out = model(input_ids=_ids(2), pixel_values=_pixels(3))
    assert out.logits_per_text.shape == (2, 3) and torch.equal(out.logits_per_image, out.logits_per_text.t())
    torch.testing.assert_close(out.text_embeds.norm(dim=-1), torch.ones(2))
    expected = out.text_embeds @ out.image_embeds.t() * model.logit_scale.exp()
    torch.testing.assert_close(out.logits_per_text, expected)
    with torch.no_grad():
        plain = model(input_ids=_ids(2), pixel_values=_pixels(3), return_dict=False)
    assert isinstance(plain, tuple) and isinstance(plain[-1], tuple)  # the towers' outputs are tuples too
    torch.testing.assert_close(plain[0], out.logits_per_image)


def test_bad_inputs_are_clear_errors() -> None:
    model = CLIPModel(CLIPConfig(text_config=TEXT, vision_config=VISION, projection_dim=8)).eval()
    with pytest.raises(InputError, match="interpolate_pos_encoding=True"):
        model.get_image_features(pixel_values=_pixels(1, size=12))
    with pytest.raises(InputError, match="channels"):
        model.get_image_features(pixel_values=torch.zeros(1, 1, 8, 8))
    with pytest.raises(InputError, match="max_position_embeddings=12"):
        model.get_text_features(input_ids=torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(InputError, match="outside the vocabulary"):
        model.get_text_features(input_ids=torch.full((1, 3), 50))
    with pytest.raises(InputError, match="both input_ids and pixel_values"):
        model(input_ids=_ids(1))


def test_configs_check_and_round_trip(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="num_attention_heads"):
        CLIPTextConfig(**{**TEXT, "num_attention_heads": 3})
    with pytest.raises(ConfigError, match="image_size"):
        CLIPVisionConfig(**{**VISION, "image_size": 0})
    with pytest.raises(ConfigError, match="projection_size"):
        SiglipConfig(text_config=TEXT, vision_config={**VISION, "hidden_size": 18, "num_attention_heads": 3})
    config = CLIPConfig(
        text_config=TEXT, vision_config=VISION, projection_dim=8, text_config_dict={"hidden_act": "gelu"}
    )
    assert config.text_config.hidden_act == "gelu"
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["text_config"]["model_type"] == "clip_text_model" and saved["vision_config"]["image_size"] == 8
    assert AutoConfig.from_pretrained(tmp_path).text_config.hidden_act == "gelu"
    tower = CLIPVisionConfig.from_pretrained(tmp_path)  # a tower config reads the nested section
    assert tower.model_type == "clip_vision_model" and tower.patch_size == 4
    assert SiglipVisionConfig().patch_size == 16


def test_towers_load_from_a_two_tower_folder(tmp_path: Path) -> None:
    model = CLIPModel(CLIPConfig(text_config=TEXT, vision_config=VISION, projection_dim=8)).eval()
    model.save_pretrained(tmp_path)
    vision = CLIPVisionModelWithProjection.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        want = model.get_image_features(pixel_values=_pixels(2)).pooler_output
        assert torch.equal(vision(pixel_values=_pixels(2)).image_embeds, want)
    assert type(AutoModel.from_pretrained(tmp_path)).__name__ == "CLIPModel"


def test_attn_implementation_reaches_both_towers() -> None:
    config = CLIPConfig(text_config=TEXT, vision_config=VISION, projection_dim=8, attn_implementation="eager")
    model = CLIPModel(config)
    assert model.text_model.config._attn_implementation == "eager"
    assert model.vision_model.config._attn_implementation == "eager"

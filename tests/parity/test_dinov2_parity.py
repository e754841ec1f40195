"""DINOv2 against the reference on tiny random checkpoints (GELU and SwiGLU MLPs, layer scale): outputs within 1e-4
at several image sizes (positions always interpolated), hidden states, attentions, losses, checkpoints both ways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from parity.harness import assert_close, load_ours, load_reference, make_reference_checkpoint

TINY: dict[str, Any] = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "mlp_ratio": 2,
    "image_size": 16,
    "patch_size": 4,
    "num_labels": 3,
    "layerscale_value": 0.5,
}


def _pixels(batch: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("swiglu", [False, True])
def test_classifier_logits_hidden_states_attentions(tmp_path: Path, swiglu: bool) -> None:
    folder, _ = make_reference_checkpoint(
        "Dinov2Config", "Dinov2ForImageClassification", tmp_path, use_swiglu_ffn=swiglu, **TINY
    )
    reference = load_reference(folder, "Dinov2ForImageClassification", attn_implementation="eager")
    ours = load_ours(folder, "AutoModelForImageClassification")
    assert type(ours).__name__ == "Dinov2ForImageClassification"
    for height, width in ((16, 16), (24, 24), (20, 28), (8, 12)):
        pixels = _pixels(2, height, width)
        with torch.no_grad():
            got = ours(pixels, output_hidden_states=True, output_attentions=True)
            want = reference(pixels, output_hidden_states=True, output_attentions=True)
        assert_close(got.logits, want.logits, atol=1e-4, what=f"logits {height}x{width}")
        assert len(got.hidden_states) == len(want.hidden_states) == TINY["num_hidden_layers"] + 1
        for index, (a, b) in enumerate(zip(got.hidden_states, want.hidden_states)):
            assert_close(a, b, atol=1e-4, what=f"hidden_states[{index}]")
        for index, (a, b) in enumerate(zip(got.attentions, want.attentions)):
            assert_close(a, b, atol=1e-5, what=f"attentions[{index}]")


@pytest.mark.parametrize(
    ("problem_type", "labels"),
    [
        (None, torch.tensor([0, 2])),
        ("multi_label_classification", torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])),
        ("regression", torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]])),
    ],
)
def test_losses_match(tmp_path: Path, problem_type: str | None, labels: torch.Tensor) -> None:
    folder, reference = make_reference_checkpoint(
        "Dinov2Config", "Dinov2ForImageClassification", tmp_path, problem_type=problem_type, **TINY
    )
    ours = load_ours(folder, "AutoModelForImageClassification")
    pixels = _pixels(2, 16, 16, seed=2)
    with torch.no_grad():
        assert_close(ours(pixels, labels=labels).loss, reference(pixels, labels=labels).loss, atol=1e-5, what="loss")


@pytest.mark.parametrize("swiglu", [False, True])
def test_base_model_and_checkpoints_both_ways(tmp_path: Path, swiglu: bool) -> None:
    folder, reference = make_reference_checkpoint(
        "Dinov2Config", "Dinov2Model", tmp_path, use_swiglu_ffn=swiglu, **TINY
    )
    ours = load_ours(folder, "AutoModel")
    pixels = _pixels(3, 20, 12, seed=4)
    masked = torch.zeros(3, 15, dtype=torch.bool)
    masked[:, ::3] = True
    with torch.no_grad():
        got, want = ours(pixels), reference(pixels)
        assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-4, what="last_hidden_state")
        assert_close(got.pooler_output, want.pooler_output, atol=1e-4, what="pooler_output")
        got_masked = ours(pixels, bool_masked_pos=masked).last_hidden_state
        assert_close(got_masked, reference(pixels, bool_masked_pos=masked).last_hidden_state, atol=1e-4)
    ours.save_pretrained(tmp_path / "ours")
    back = load_reference(tmp_path / "ours", "Dinov2Model")
    with torch.no_grad():
        assert_close(back(pixels).last_hidden_state, want.last_hidden_state, atol=1e-5)


def test_image_classification_pipeline_matches_reference(tmp_path: Path) -> None:
    import numpy as np
    import PIL.Image
    import transformers
    from transformers.models.bit.image_processing_pil_bit import BitImageProcessorPil

    from microformers import pipeline
    from microformers_vision import BitImageProcessor

    folder, reference = make_reference_checkpoint("Dinov2Config", "Dinov2ForImageClassification", tmp_path, **TINY)
    settings = {"size": {"shortest_edge": 20}, "crop_size": {"height": 16, "width": 16}}
    BitImageProcessor(**settings).save_pretrained(folder)
    image = PIL.Image.fromarray(np.random.default_rng(3).integers(0, 256, (27, 35, 4), dtype=np.uint8))
    ours = pipeline("image-classification", model=str(folder))
    theirs = transformers.pipeline(
        "image-classification", model=reference, image_processor=BitImageProcessorPil(**settings)
    )
    got, want = ours(image, top_k=3), theirs(image, top_k=3)
    assert [g["label"] for g in got] == [w["label"] for w in want]
    np.testing.assert_allclose([g["score"] for g in got], [w["score"] for w in want], atol=1e-4)

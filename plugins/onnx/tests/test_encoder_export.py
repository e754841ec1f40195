"""Vision and audio encoders exported to ONNX (tiny random ViT, CLIP and Wav2Vec2), and the refusals of tasks that do
not fit a model, checked before anything is exported or written.

Each graph is exported once per module; the export checks ONNX Runtime against PyTorch itself (its reported
difference is asserted), and the ORT model classes are compared with the PyTorch model on a new batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers_sdk.testing import assert_close, one_thread  # noqa: F401

pytest.importorskip("onnxruntime")

from microformers_onnx import export_onnx
from microformers_onnx.export import OnnxExportError

VISION = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 20,
          "image_size": 8, "patch_size": 4}  # fmt: skip
# name -> (plugin, model_type, Auto class, config, task, ORT class, outputs)
ENCODERS: dict[str, tuple[str, str, str, dict[str, Any], str, str, tuple[str, ...]]] = {
    "vit": ("vit", "vit", "AutoModelForImageClassification", {**VISION, "num_labels": 3}, "image-classification",
            "ORTModelForImageClassification", ("logits",)),
    "clip": ("clip", "clip", "AutoModel", {"text_config": {"vocab_size": 50, "hidden_size": 16, "intermediate_size": 20,
             "num_hidden_layers": 1, "num_attention_heads": 2}, "vision_config": VISION, "projection_dim": 8},
             "feature-extraction", "ORTModelForFeatureExtraction", ("last_hidden_state", "pooler_output")),
    "wav2vec2": ("wav2vec2", "wav2vec2", "AutoModelForCTC", {"vocab_size": 12, "hidden_size": 16,
                 "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 20, "conv_dim": (8, 8),
                 "conv_stride": (5, 2), "conv_kernel": (10, 3), "num_conv_pos_embeddings": 16,
                 "num_conv_pos_embedding_groups": 2}, "automatic-speech-recognition", "ORTModelForCTC", ("logits",)),
    "whisper": ("whisper", "whisper", "AutoModelForSpeechSeq2Seq", {"vocab_size": 60, "d_model": 16,
                "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
                "encoder_ffn_dim": 20, "decoder_ffn_dim": 20, "num_mel_bins": 8, "max_source_positions": 10,
                "max_target_positions": 20, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 3,
                "decoder_start_token_id": 2}, "feature-extraction", "ORTModelForFeatureExtraction",
                ("last_hidden_state",)),
}  # fmt: skip
INPUTS = {"wav2vec2": "input_values", "whisper": "input_features"}


def build(name: str) -> Any:
    plugin, model_type, auto, config, *_ = ENCODERS[name]
    pytest.importorskip(f"microformers_{plugin}")
    torch.manual_seed(0)
    model = getattr(microformers, auto).from_config(microformers.AutoConfig.for_model(model_type, **config)).eval()
    with torch.no_grad():  # wider than the initialiser, so that outputs vary visibly
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module", params=list(ENCODERS))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Any]:
    name = request.param
    model = build(name)
    target = tmp_path_factory.mktemp(name) / "onnx"
    if name == "vit":  # from a folder: the task follows config.architectures (ViTForImageClassification)
        source = target.parent / "model"
        model.save_pretrained(source)
        export_onnx(source, target)
    else:
        export_onnx(model, target, task=ENCODERS[name][4])
    return name, target, model


def new_input(name: str, batch: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    if name == "wav2vec2":
        return {"input_values": torch.randn(batch, 2345, generator=generator)}  # a length the export never saw
    if name == "whisper":
        return {"input_features": torch.randn(batch, 8, 20, generator=generator)}  # 2 x max_source_positions frames
    return {"pixel_values": torch.randn(batch, 3, 8, 8, generator=generator)}


def test_export_names_and_validates_the_graph(exported) -> None:
    name, folder, _ = exported
    *_, task, _, outputs = ENCODERS[name]
    info = json.loads((folder / "onnx_export.json").read_text())
    assert info["task"] == task and info["exporter"] == "dynamo"
    assert info["input_names"] == [INPUTS.get(name, "pixel_values")]
    assert tuple(info["output_names"]) == outputs
    assert info["max_difference"] <= 1e-4  # the export's own check: ONNX Runtime against PyTorch
    assert (folder / "model.onnx").is_file() and (folder / "config.json").is_file()


def test_ort_model_class_gives_the_pytorch_outputs_on_a_new_batch(exported) -> None:
    name, folder, model = exported
    *_, ort_class, outputs = ENCODERS[name]
    ort = getattr(microformers, ort_class).from_pretrained(folder)
    inputs = new_input(name, batch=4)
    got = ort(**inputs)
    with torch.no_grad():
        encoder = model.vision_model if name == "clip" else model.get_encoder() if name == "whisper" else model
        want = encoder(**inputs)
    for output in outputs:
        assert_close(getattr(got, output), getattr(want, output), atol=1e-4, msg=f"{name} {output}")


def test_ort_model_refuses_inputs_its_graph_does_not_take(exported) -> None:
    name, folder, _ = exported
    ort = getattr(microformers, ENCODERS[name][5]).from_pretrained(folder)
    inputs = new_input(name, batch=1)
    with pytest.raises(microformers.InputError, match="does not take"):
        ort(**inputs, output_attentions=True)
    if name == "wav2vec2":
        with pytest.raises(microformers.InputError, match="no attention_mask"):
            ort(**inputs, attention_mask=torch.tensor([[1] * 2000 + [0] * 345]))


@pytest.mark.parametrize(
    ("name", "task", "message"),
    [
        ("vit", "text-generation-with-past", "needs a causal LM on token ids"),
        ("vit", "automatic-speech-recognition", "choose --task feature-extraction or --task image-classification"),
        ("wav2vec2", "image-classification", "choose --task feature-extraction or --task automatic-speech-recognition"),
        ("vit", "text2text-generation", "is not one. Choose another --task"),
        ("whisper", "text2text-generation", "Use --task automatic-speech-recognition .encoder and decoder graphs."),
    ],
)
def test_task_that_does_not_fit_the_model_is_refused_before_writing(
    name: str, task: str, message: str, tmp_path: Path
) -> None:
    model = build(name)
    with pytest.raises(OnnxExportError, match=message):
        export_onnx(model, tmp_path / "out", task=task)
    assert not (tmp_path / "out").exists()


def test_pixel_task_on_a_text_model_is_refused_naming_the_input(tmp_path: Path) -> None:
    pytest.importorskip("microformers_distilbert")
    config = microformers.AutoConfig.for_model(
        "distilbert", vocab_size=30, dim=16, n_layers=1, n_heads=2, hidden_dim=20
    )
    model = microformers.AutoModel.from_config(config).eval()
    with pytest.raises(OnnxExportError, match="image-classification.*pixel_values.*reads input_ids"):
        export_onnx(model, tmp_path / "out", task="image-classification")
    assert not (tmp_path / "out").exists()

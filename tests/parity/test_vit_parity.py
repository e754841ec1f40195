"""ViT against the reference on tiny random checkpoints: outputs within 1e-4 at several image sizes (interpolated
positions included), hidden states and attentions, the three losses, checkpoints both ways, pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch

from parity.harness import assert_close, load_ours, load_reference, make_reference_checkpoint

TINY: dict[str, Any] = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "image_size": 16,
    "patch_size": 4,
    "num_labels": 3,
}


def _pixels(batch: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    folder, reference = make_reference_checkpoint(
        "ViTConfig", "ViTForImageClassification", tmp_path_factory.mktemp("vit"), **TINY
    )
    return folder, reference, load_ours(folder, "AutoModelForImageClassification")


@pytest.mark.parametrize(
    ("height", "width", "interpolate"),
    [(16, 16, False), (16, 16, True), (24, 24, True), (32, 20, True), (12, 28, True)],
)
def test_logits_match_at_image_sizes(
    classifier: tuple[Path, Any, Any], height: int, width: int, interpolate: bool
) -> None:
    _, reference, ours = classifier
    pixels = _pixels(2, height, width)
    with torch.no_grad():
        got = ours(pixels, interpolate_pos_encoding=interpolate).logits
        want = reference(pixels, interpolate_pos_encoding=interpolate).logits
    assert_close(got, want, atol=1e-4)


def test_hidden_states_and_attentions_match(classifier: tuple[Path, Any, Any]) -> None:
    folder, _, ours = classifier
    reference = load_reference(folder, "ViTForImageClassification", attn_implementation="eager")
    pixels = _pixels(2, 16, 16, seed=1)
    with torch.no_grad():
        got = ours(pixels, output_hidden_states=True, output_attentions=True)
        want = reference(pixels, output_hidden_states=True, output_attentions=True)
    assert len(got.hidden_states) == len(want.hidden_states) == TINY["num_hidden_layers"] + 1
    for index, (a, b) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(a, b, atol=1e-4, what=f"hidden_states[{index}]")
    assert len(got.attentions) == len(want.attentions) == TINY["num_hidden_layers"]
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
        "ViTConfig", "ViTForImageClassification", tmp_path, problem_type=problem_type, **TINY
    )
    ours = load_ours(folder, "AutoModelForImageClassification")
    pixels = _pixels(2, 16, 16, seed=2)
    with torch.no_grad():
        got, want = ours(pixels, labels=labels), reference(pixels, labels=labels)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")


def test_single_label_regression_loss_matches(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(
        "ViTConfig", "ViTForImageClassification", tmp_path, **{**TINY, "num_labels": 1}
    )
    ours = load_ours(folder, "AutoModelForImageClassification")
    pixels, labels = _pixels(2, 16, 16, seed=3), torch.tensor([0.3, -1.2])
    with torch.no_grad():
        assert_close(ours(pixels, labels=labels).loss, reference(pixels, labels=labels).loss, atol=1e-5, what="loss")


def test_base_model_with_pooler_both_ways(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint("ViTConfig", "ViTModel", tmp_path, **{**TINY, "pooler_act": "tanh"})
    ours = load_ours(folder, "AutoModel")
    assert type(ours).__name__ == "ViTModel"
    pixels = _pixels(3, 20, 24, seed=4)
    with torch.no_grad():
        got = ours(pixels, interpolate_pos_encoding=True)
        want = reference(pixels, interpolate_pos_encoding=True)
    assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-4, what="last_hidden_state")
    assert_close(got.pooler_output, want.pooler_output, atol=1e-4, what="pooler_output")
    ours.save_pretrained(tmp_path / "ours")
    back = load_reference(tmp_path / "ours", "ViTModel")
    with torch.no_grad():
        assert_close(back(pixels, interpolate_pos_encoding=True).pooler_output, want.pooler_output, atol=1e-5)


def test_our_checkpoint_loads_in_reference(classifier: tuple[Path, Any, Any], tmp_path: Path) -> None:
    _, reference, ours = classifier
    ours.save_pretrained(tmp_path / "ours")
    back = load_reference(tmp_path / "ours", "ViTForImageClassification")
    pixels = _pixels(2, 16, 16, seed=5)
    with torch.no_grad():
        assert_close(back(pixels).logits, reference(pixels).logits, atol=1e-5)


def _processor_folder(folder: Path) -> None:
    from microformers_vision import ViTImageProcessor

    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(folder)


def test_image_classification_pipeline_matches_reference(classifier: tuple[Path, Any, Any], tmp_path: Path) -> None:
    import transformers
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    from microformers import pipeline

    folder, reference, _ = classifier
    _processor_folder(folder)
    rng = np.random.default_rng(0)
    image = PIL.Image.fromarray(rng.integers(0, 256, (30, 22, 3), dtype=np.uint8))
    path = tmp_path / "image.png"
    image.save(path)
    ours = pipeline("image-classification", model=str(folder))
    theirs = transformers.pipeline(
        "image-classification", model=reference, image_processor=ViTImageProcessorPil(size={"height": 16, "width": 16})
    )
    for options in ({}, {"top_k": 2}, {"function_to_apply": "sigmoid"}, {"function_to_apply": "none", "top_k": 1}):
        for inputs in (image, str(path)):
            got, want = ours(inputs, **options), theirs(inputs, **options)
            assert [g["label"] for g in got] == [w["label"] for w in want]
            np.testing.assert_allclose([g["score"] for g in got], [w["score"] for w in want], atol=1e-4)
    array = np.asarray(image)
    assert [g["label"] for g in ours(array)] == [w["label"] for w in theirs(image)]
    batch = ours([image, str(path)], top_k=1)
    assert len(batch) == 2 and batch[0] == batch[1]


def test_image_feature_extraction_pipeline_matches_reference(tmp_path: Path) -> None:
    import transformers
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    from microformers import pipeline

    folder, reference = make_reference_checkpoint("ViTConfig", "ViTModel", tmp_path, **TINY)
    _processor_folder(folder)
    image = PIL.Image.fromarray(np.random.default_rng(1).integers(0, 256, (18, 25, 3), dtype=np.uint8))
    ours = pipeline("image-feature-extraction", model=str(folder))
    theirs = transformers.pipeline(
        "image-feature-extraction",
        model=reference,
        image_processor=ViTImageProcessorPil(size={"height": 16, "width": 16}),
    )
    for options in ({}, {"pool": True}):
        got = torch.tensor(ours(image, **options))
        want = torch.tensor(theirs(image, **options))
        assert_close(got, want, atol=1e-4, what=f"features {options}")


def test_microformers_run_image_classification(classifier: tuple[Path, Any, Any], tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    folder, _, _ = classifier
    _processor_folder(folder)
    path = tmp_path / "image.png"
    PIL.Image.fromarray(np.random.default_rng(2).integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(path)
    cli = [
        sys.executable,
        "-c",
        "import sys; from microformers.cli import main; sys.exit(main())",
        "run",
        "image-classification",
    ]
    done = subprocess.run([*cli, str(path), "--model", str(folder), "-o", "top_k=2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result) == 2 and {"label", "score"} <= set(result[0])
    refused = subprocess.run(
        [*cli, "https://example.com/a.png", "--model", str(folder)], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "URL" in refused.stderr


def test_pipeline_takes_images_keyword_and_batches(classifier: tuple[Path, Any, Any]) -> None:
    from microformers import pipeline

    folder, _, _ = classifier
    _processor_folder(folder)
    image = PIL.Image.fromarray(np.random.default_rng(5).integers(0, 256, (21, 17, 3), dtype=np.uint8))
    pipe = pipeline("image-classification", model=str(folder))
    one = pipe(images=image, top_k=2)
    batched = pipe([image, image, image], batch_size=2, top_k=2)
    assert batched == [one] * 3 or all([g["label"] for g in row] == [g["label"] for g in one] for row in batched)


@pytest.mark.parametrize("head", ["DeiTForImageClassification", "DeiTForImageClassificationWithTeacher", "DeiTModel"])
def test_deit_matches_reference(tmp_path: Path, head: str) -> None:
    from microformers_vit import modeling_deit

    folder, _ = make_reference_checkpoint("DeiTConfig", head, tmp_path, **TINY)
    reference = load_reference(folder, head, attn_implementation="eager")
    ours = getattr(modeling_deit, head).from_pretrained(folder).eval()
    for height, width, interpolate in ((16, 16, False), (24, 20, True), (12, 12, True)):
        pixels = _pixels(2, height, width, seed=6)
        with torch.no_grad():
            got = ours(pixels, interpolate_pos_encoding=interpolate, output_hidden_states=True, output_attentions=True)
            want = reference(
                pixels, interpolate_pos_encoding=interpolate, output_hidden_states=True, output_attentions=True
            )
        names = ("last_hidden_state", "pooler_output") if head == "DeiTModel" else ("logits",)
        if head.endswith("WithTeacher"):
            names = ("logits", "cls_logits", "distillation_logits")
        for name in names:
            assert_close(got[name], want[name], atol=1e-4, what=f"{name} {height}x{width}")
        for index, (a, b) in enumerate(zip(got.hidden_states, want.hidden_states)):
            assert_close(a, b, atol=1e-4, what=f"hidden_states[{index}]")
        for index, (a, b) in enumerate(zip(got.attentions, want.attentions)):
            assert_close(a, b, atol=1e-5, what=f"attentions[{index}]")
    ours.save_pretrained(tmp_path / "ours")
    back = load_reference(tmp_path / "ours", head)
    pixels = _pixels(2, 16, 16, seed=7)
    with torch.no_grad():
        assert_close(back(pixels)[0], reference(pixels)[0], atol=1e-5)


def test_deit_auto_classes_and_loss(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(
        "DeiTConfig", "DeiTForImageClassificationWithTeacher", tmp_path, **TINY
    )
    ours = load_ours(folder, "AutoModelForImageClassification")
    assert type(ours).__name__ == "DeiTForImageClassificationWithTeacher"
    assert type(load_ours(folder, "AutoModel")).__name__ == "DeiTModel"
    folder, reference = make_reference_checkpoint(
        "DeiTConfig",
        "DeiTForImageClassification",
        tmp_path / "plain",
        problem_type="multi_label_classification",
        **TINY,
    )
    from microformers_vit import DeiTForImageClassification

    ours = DeiTForImageClassification.from_pretrained(folder).eval()
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    pixels = _pixels(2, 16, 16, seed=8)
    with torch.no_grad():
        assert_close(ours(pixels, labels=labels).loss, reference(pixels, labels=labels).loss, atol=1e-5, what="loss")


def test_image_classification_pipeline_converts_modes_as_the_reference(classifier: tuple[Path, Any, Any]) -> None:
    """Grey, RGBA, LA, palette, CMYK, 1-bit and a 3000x2000 image: the same labels and scores as the reference
    pipeline (both read PIL images with EXIF rotation, then ``convert("RGB")``)."""
    import transformers
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    from microformers import pipeline

    folder, reference, _ = classifier
    _processor_folder(folder)
    rng = np.random.default_rng(3)
    rgb = rng.integers(0, 256, (30, 22, 3), dtype=np.uint8)
    rgba = PIL.Image.fromarray(rng.integers(0, 256, (30, 22, 4), dtype=np.uint8))
    images = {
        "grey": PIL.Image.fromarray(rgb[..., 0]),
        "rgba": rgba,
        "la": rgba.convert("LA"),
        "palette": PIL.Image.fromarray(rgb).convert("P"),
        "cmyk": PIL.Image.fromarray(rgb).convert("CMYK"),
        "one_bit": PIL.Image.fromarray(rgb[..., 0]).convert("1"),
        "far_over_the_model_size": PIL.Image.fromarray(rng.integers(0, 256, (3000, 2000, 3), dtype=np.uint8)),
    }
    ours = pipeline("image-classification", model=str(folder))
    theirs = transformers.pipeline(
        "image-classification", model=reference, image_processor=ViTImageProcessorPil(size={"height": 16, "width": 16})
    )
    for name, image in images.items():
        got, want = ours(image, top_k=3), theirs(image, top_k=3)
        assert [g["label"] for g in got] == [w["label"] for w in want], name
        assert_close(
            torch.tensor([g["score"] for g in got]), torch.tensor([w["score"] for w in want]), atol=1e-4, what=name
        )


def test_image_pipeline_bad_inputs_are_clear_errors_naming_the_input(
    classifier: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    import io

    from microformers import FileMissingError, pipeline
    from microformers_vision import ImageInputError

    folder, _, _ = classifier
    _processor_folder(folder)
    pipe = pipeline("image-classification", model=str(folder))
    rgb = np.random.default_rng(4).integers(0, 256, (20, 20, 3), dtype=np.uint8)
    png, jpeg = io.BytesIO(), io.BytesIO()
    PIL.Image.fromarray(rgb).save(png, format="PNG")
    PIL.Image.fromarray(rgb).save(jpeg, format="JPEG")
    files = {
        "cut.png": png.getvalue()[:80],
        "cut.jpg": jpeg.getvalue()[: len(jpeg.getvalue()) // 2],
        "notes.txt": b"not an image",
        "empty.png": b"",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ImageInputError, match=f"{name}.*not a readable image"):
            pipe(str(tmp_path / name))
    wide = tmp_path / "sixteen_bit.png"
    PIL.Image.fromarray(np.full((8, 8), 1000, np.uint16)).save(wide)
    with pytest.raises(ImageInputError, match="sixteen_bit.png.*16/32-bit"):
        pipe(str(wide))
    with pytest.raises(ImageInputError, match="mode I;16.*16/32-bit"):
        pipe(PIL.Image.fromarray(np.full((8, 8), 1000, np.uint16)))
    with pytest.raises(ImageInputError, match="0 pixels"):
        pipe(PIL.Image.new("RGB", (0, 5)))
    with pytest.raises(ImageInputError, match=r"shape \(0, 5, 3\).*0 pixels"):
        pipe(np.zeros((0, 5, 3), np.uint8))
    with pytest.raises(ImageInputError, match="is a folder"):
        pipe(str(tmp_path))
    with pytest.raises(FileMissingError, match="missing.png"):
        pipe(str(tmp_path / "missing.png"))
    with pytest.raises(ImageInputError, match="URL"):
        pipe("http://example.com/cat.png")
    with pytest.raises(ImageInputError, match="cannot read"):
        pipe({"not": "an image"})


def _sequential_trainer(trainer_cls: type) -> type:
    from torch.utils.data import SequentialSampler

    class Sequential(trainer_cls):  # type: ignore[misc, valid-type]
        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> SequentialSampler:
            dataset = args[0] if args and args[0] is not None else self.train_dataset
            return SequentialSampler(dataset)

    return Sequential


def _train_losses(trainer_cls: type, args_cls: type, collator: Any, model: Any, dataset: Any, **options: Any) -> Any:
    args = args_cls(
        output_dir=options.pop("output_dir"), per_device_train_batch_size=4, max_steps=3, learning_rate=1e-2,
        lr_scheduler_type="constant", logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        use_cpu=True, seed=0, **options,
    )  # fmt: skip
    trainer = _sequential_trainer(trainer_cls)(model=model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.train()
    return torch.tensor([entry["loss"] for entry in trainer.state.log_history if "loss" in entry])


def test_image_fine_tuning_and_remove_unused_columns_behave_as_the_reference_trainer(
    classifier: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    """The image-classification guide's flow in both Trainers, same checkpoint and batches: a ``datasets`` dataset
    whose ``with_transform`` turns the ``image`` column into ``pixel_values`` needs ``remove_unused_columns=False``
    in both (with True both drop ``image`` before the transform reads it); a list of rows with an extra column
    has it dropped by both; ``DefaultDataCollator`` stacks ``pixel_values``; the losses agree at every step."""
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("accelerate", reason="the reference Trainer needs accelerate")
    import transformers

    import microformers
    from microformers_vision import ViTImageProcessor

    folder, _, _ = classifier
    processor = ViTImageProcessor(size={"height": 16, "width": 16})
    rng = np.random.default_rng(6)
    images = [PIL.Image.fromarray(rng.integers(0, 256, (20, 18, 3), dtype=np.uint8)) for _ in range(8)]
    labels = [index % 3 for index in range(8)]

    def transform(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {
            "pixel_values": [processor(image)["pixel_values"][0] for image in batch["image"]],
            "labels": batch["label"],
        }

    def image_dataset() -> Any:
        features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
        return datasets.Dataset.from_dict({"image": images, "label": labels}, features=features).with_transform(
            transform
        )

    rows = [
        {"pixel_values": processor(image)["pixel_values"][0], "labels": label, "file_name": f"{index}.png"}
        for index, (image, label) in enumerate(zip(images, labels))
    ]
    sides = {
        "ours": (microformers.Trainer, microformers.TrainingArguments, microformers.DefaultDataCollator(),
                 lambda: load_ours(folder, "AutoModelForImageClassification")),
        "reference": (transformers.Trainer, transformers.TrainingArguments, transformers.DefaultDataCollator(),
                      lambda: load_reference(folder, "ViTForImageClassification")),
    }  # fmt: skip
    losses: dict[tuple[str, str], torch.Tensor] = {}
    for side, (trainer_cls, args_cls, collator, load) in sides.items():
        with pytest.raises(KeyError, match="image"):
            _train_losses(trainer_cls, args_cls, collator, load(), image_dataset(), output_dir=str(tmp_path / side))
        losses[side, "transform"] = _train_losses(
            trainer_cls, args_cls, collator, load(), image_dataset(), output_dir=str(tmp_path / side),
            remove_unused_columns=False,
        )  # fmt: skip
        losses[side, "rows"] = _train_losses(
            trainer_cls, args_cls, collator, load(), rows, output_dir=str(tmp_path / side)
        )
    for kind in ("transform", "rows"):
        assert len(losses["ours", kind]) == 3
        assert_close(losses["ours", kind], losses["reference", kind], atol=1e-4, what=f"losses ({kind})")


def test_image_pipeline_options_out_of_range_are_named(classifier: tuple[Path, Any, Any]) -> None:
    from microformers import ConfigError, pipeline

    folder, _, _ = classifier
    _processor_folder(folder)
    image = PIL.Image.fromarray(np.random.default_rng(7).integers(0, 256, (16, 16, 3), dtype=np.uint8))
    classify = pipeline("image-classification", model=str(folder))
    for bad, match in (
        ({"top_k": 0}, "top_k=0"),
        ({"top_k": True}, "top_k=True"),
        ({"function_to_apply": "relu"}, "function_to_apply='relu'"),
        ({"not_an_option": 1}, "not_an_option"),
    ):
        with pytest.raises((ConfigError, TypeError), match=match):
            classify(image, **bad)
    assert len(classify(image, top_k=10)) == TINY["num_labels"]  # top_k past the labels: every label, as the reference
    from microformers_vision import ViTImageProcessor
    from microformers_vit import ViTConfig, ViTModel

    no_pooler = ViTModel(ViTConfig(**TINY), add_pooling_layer=False).eval()
    processor = ViTImageProcessor(size={"height": 16, "width": 16})
    features = pipeline("image-feature-extraction", model=no_pooler, image_processor=processor)
    with pytest.raises(ConfigError, match="pool=True needs a model with a pooler"):
        features(image, pool=True)
    with pytest.raises(ConfigError, match="images twice"):
        features(image, images=image)

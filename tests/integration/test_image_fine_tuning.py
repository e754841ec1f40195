"""The image-classification guide's fine-tuning flow end to end: image processor -> ``DefaultDataCollator`` on
``pixel_values`` -> Trainer -> image-classification pipeline.

Synthetic images: each class is one dominant colour channel under noise and a random blob. A tiny
``ViTForImageClassification`` is fine-tuned with the ``microformers-trainer`` Trainer (the dataset rows carry an
extra column that ``remove_unused_columns`` drops, as the reference does) until its loss falls well below where it
started; saved with its processor, the pipeline then labels the training images by name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import PIL.Image
import torch

import microformers
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from microformers_vision import ViTImageProcessor
from microformers_vit import ViTConfig, ViTForImageClassification

LABELS = ["red", "green", "blue"]


def picture(label: int, seed: int) -> PIL.Image.Image:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 90, (20, 20, 3))
    pixels[..., label] += 140
    top, left = rng.integers(0, 12, 2)
    pixels[top : top + 8, left : left + 8] = rng.integers(0, 256, 3)
    return PIL.Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def test_finetune_tiny_vit_with_trainer_then_classify(tmp_path: Path) -> None:
    processor = ViTImageProcessor(size={"height": 16, "width": 16})
    images = [(picture(index % 3, seed=index), index % 3) for index in range(24)]
    dataset = [
        {"pixel_values": processor(image)["pixel_values"][0], "labels": label, "file_name": f"image-{index}.png"}
        for index, (image, label) in enumerate(images)
    ]
    config = ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48, image_size=16, patch_size=4,
        num_labels=3, id2label=dict(enumerate(LABELS)), label2id={name: i for i, name in enumerate(LABELS)},
    )  # fmt: skip
    torch.manual_seed(0)
    model = ViTForImageClassification(config)
    args = microformers.TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=8, learning_rate=2e-3, max_steps=30,
        lr_scheduler_type="constant", logging_steps=5, save_strategy="no", report_to="none", seed=0,
        disable_tqdm=True, optim="adamw_torch",
    )  # fmt: skip
    trainer = microformers.Trainer(
        model=model, args=args, train_dataset=dataset, data_collator=microformers.DefaultDataCollator()
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) >= 5
    assert losses[-1] < 0.3 * losses[0], f"the loss did not fall well below its start: {losses}"

    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    classify = microformers.pipeline("image-classification", model=str(tmp_path / "model"))
    predicted = [classify(image, top_k=1)[0]["label"] for image, _ in images[:9]]
    assert predicted == [LABELS[label] for _, label in images[:9]], predicted

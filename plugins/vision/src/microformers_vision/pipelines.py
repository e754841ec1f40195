"""The ``image-classification``, ``image-feature-extraction`` and ``zero-shot-image-classification`` pipelines.

Inputs: a file path (or ``file://`` address), bytes, a PIL image, a numpy array or torch tensor (HWC or CHW), or a
list of them. ``http(s)://`` addresses are refused: microformers never downloads (fetch the file and pass it).
The image processor comes from ``image_processor=`` (an object or a folder), else from the model's folder.
Labels and scores equal the reference pipeline's.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import PIL.Image
import PIL.ImageOps
import torch

from microformers import Pipeline
from microformers.errors import ConfigError

from .image_utils import ImageInputError, describe, load_image

__all__ = ["ImageClassificationPipeline", "ImageFeatureExtractionPipeline", "ZeroShotImageClassificationPipeline"]

_FUNCTIONS = ("softmax", "sigmoid", "none")


def _resolve_image_processor(image_processor: Any, model: Any, task: str) -> Any:
    from microformers.auto import AutoImageProcessor

    if image_processor is None:
        source = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "name_or_path", "")
        if not source:
            raise ConfigError(
                f"the {task} pipeline needs an image processor: pass image_processor=... (an object or a folder), "
                "or a model loaded from a folder that has preprocessor_config.json"
            )
        image_processor = source
    if isinstance(image_processor, (str, os.PathLike)):
        image_processor = AutoImageProcessor.from_pretrained(str(image_processor))
    if not callable(image_processor):
        raise ConfigError(f"image_processor={image_processor!r} is not an image processor")
    return image_processor


def _is_single_image(inputs: Any) -> bool:
    if isinstance(inputs, (list, tuple, torch.utils.data.Dataset)) or hasattr(inputs, "__next__"):
        return False
    if isinstance(inputs, (np.ndarray, torch.Tensor)):
        return inputs.ndim <= 3
    return True


def _pipeline_image(image: Any, source: Any = None) -> PIL.Image.Image:
    """As the reference pipelines read a file or PIL image: EXIF rotation applied, then ``convert("RGB")``
    (alpha dropped, not composited); 16/32-bit images are refused rather than clipped. ``source`` (the path or
    bytes the image was read from) is named in the errors."""
    name = describe(image) if source is None or source is image else f"{describe(source)} ({describe(image)})"
    if not isinstance(image, PIL.Image.Image):
        raise ImageInputError(f"cannot read {name} as an image; pass a path, bytes, a PIL image or an array")
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        raise ImageInputError(f"{name} has 16/32-bit or float pixels; scale it to 0..255 and convert it to 'RGB' first")
    if 0 in image.size:
        raise ImageInputError(f"{name} has 0 pixels; pass an image at least 1x1")
    return PIL.ImageOps.exif_transpose(image).convert("RGB")


class _ImagePipeline(Pipeline):
    needs_tokenizer = False
    task_name = "image"

    def __init__(self, model: Any, tokenizer: Any = None, image_processor: Any = None, **kwargs: Any) -> None:
        kwargs.pop("feature_extractor", None)
        self.image_processor = _resolve_image_processor(image_processor, model, self.task_name)
        super().__init__(model, tokenizer, **kwargs)

    def __call__(self, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``pipe(image_or_images, **options)``; ``images=`` is accepted as the reference accepts it."""
        if "images" in kwargs:
            if inputs is not None:
                raise ConfigError(f"the {self.task_name} pipeline got images twice (as an argument and as images=)")
            inputs = kwargs.pop("images")
        if inputs is None:
            raise ConfigError(f"the {self.task_name} pipeline needs images: pipe(image) or pipe([image, ...])")
        return super().__call__(inputs, *args, **kwargs)

    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        return _is_single_image(inputs)

    def preprocess(self, image: Any, **image_processor_kwargs: Any) -> dict[str, Any]:
        if not isinstance(image, (np.ndarray, torch.Tensor)):
            image = _pipeline_image(load_image(image), source=image)
        inputs = dict(self.image_processor(image, return_tensors="pt", **image_processor_kwargs))
        dtype = getattr(self.model, "dtype", None)
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            inputs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
        return inputs

    def save_pretrained(self, save_directory: str | Any, **kwargs: Any) -> None:
        super().save_pretrained(save_directory, **kwargs)
        if hasattr(self.image_processor, "save_pretrained"):
            self.image_processor.save_pretrained(save_directory)


class ImageClassificationPipeline(_ImagePipeline):
    """``pipeline("image-classification", model=folder)(image)`` -> ``[{"label", "score"}, ...]`` (top 5)."""

    task_name = "image-classification"

    def _sanitize_parameters(
        self, top_k: int | None = None, function_to_apply: str | None = None, timeout: float | None = None
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        post: dict[str, Any] = {}
        if top_k is not None:
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
                raise ConfigError(f"top_k={top_k!r}: pass a positive integer")
            post["top_k"] = top_k
        if function_to_apply is not None:
            name = str(getattr(function_to_apply, "value", function_to_apply)).lower()
            if name not in _FUNCTIONS:
                raise ConfigError(f"function_to_apply={function_to_apply!r}: use 'softmax', 'sigmoid' or 'none'")
            post["function_to_apply"] = name
        return {}, {}, post

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        return {"logits": self.model(**model_inputs).logits}

    def postprocess(
        self, model_outputs: dict[str, Any], function_to_apply: str | None = None, top_k: int = 5
    ) -> list[dict[str, Any]]:
        config = self.model.config
        if function_to_apply is None:
            problem = getattr(config, "problem_type", None)
            if problem == "regression":
                function_to_apply = "none"
            elif problem == "multi_label_classification" or config.num_labels == 1:
                function_to_apply = "sigmoid"
            else:
                function_to_apply = "softmax"
        logits = model_outputs["logits"][0].float()
        if function_to_apply == "softmax":
            scores = logits.softmax(-1)
        elif function_to_apply == "sigmoid":
            scores = logits.sigmoid()
        else:
            scores = logits
        top_k = min(top_k, config.num_labels)
        order = sorted(range(scores.shape[0]), key=lambda i: -float(scores[i]))[:top_k]
        return [{"label": config.id2label[i], "score": float(scores[i])} for i in order]


class ImageFeatureExtractionPipeline(_ImagePipeline):
    """``pipeline("image-feature-extraction", model=folder)(image)`` -> the last hidden states as nested lists
    (``pool=True``: the pooler output; ``return_tensors=True``: torch tensors)."""

    task_name = "image-feature-extraction"

    def _sanitize_parameters(
        self,
        image_processor_kwargs: dict[str, Any] | None = None,
        return_tensors: bool | None = None,
        pool: bool | None = None,
        timeout: float | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        post: dict[str, Any] = {}
        if pool is not None:
            post["pool"] = bool(pool)
        if return_tensors is not None:
            post["return_tensors"] = bool(return_tensors)
        return dict(image_processor_kwargs or {}), {}, post

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        outputs = self.model(**model_inputs)
        result = {"features": outputs[0]}
        pooled = outputs.get("pooler_output") if hasattr(outputs, "get") else None
        if pooled is not None:
            result["pooler_output"] = pooled
        return result

    def postprocess(self, model_outputs: dict[str, Any], pool: bool = False, return_tensors: bool = False) -> Any:
        if pool:
            if "pooler_output" not in model_outputs:
                raise ConfigError(
                    "image-feature-extraction: pool=True needs a model with a pooler (it returned no pooler_output)"
                )
            outputs = model_outputs["pooler_output"]
        else:
            outputs = model_outputs["features"]
        return outputs if return_tensors else outputs.tolist()


class ZeroShotImageClassificationPipeline(_ImagePipeline):
    """``pipeline("zero-shot-image-classification", model=folder)(image, candidate_labels=[...])`` ->
    ``[{"score", "label"}, ...]`` best first, for image-text models (CLIP, SigLIP) that return ``logits_per_image``.

    Each label is put into ``hypothesis_template`` (default ``"This is a photo of {}."``) and the texts are scored
    against the image: softmax over the labels, or for SigLIP (``model_type`` containing ``siglip``) an independent
    sigmoid per label with the texts padded to 64 tokens, as the reference pipeline does. ``tokenizer_kwargs`` go to
    the tokenizer call over the defaults.
    """

    needs_tokenizer = True
    task_name = "zero-shot-image-classification"

    def __call__(self, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        if args:
            if "candidate_labels" in kwargs or len(args) > 1:
                raise ConfigError(
                    "zero-shot-image-classification takes pipe(image, candidate_labels=[...], hypothesis_template=...)"
                )
            kwargs["candidate_labels"] = args[0]
        return super().__call__(inputs, **kwargs)

    def _sanitize_parameters(
        self,
        candidate_labels: Any = None,
        hypothesis_template: str | None = None,
        tokenizer_kwargs: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        pre: dict[str, Any] = {}
        if candidate_labels is not None:
            if isinstance(candidate_labels, str):
                candidate_labels = [candidate_labels]
            labels = list(candidate_labels)
            if not labels or not all(isinstance(label, str) for label in labels):
                raise ConfigError(f"candidate_labels={candidate_labels!r}: pass a non-empty list of label strings")
            pre["candidate_labels"] = labels
        if hypothesis_template is not None:
            if not isinstance(hypothesis_template, str) or "{}" not in hypothesis_template:
                raise ConfigError(
                    f"hypothesis_template={hypothesis_template!r} must be a string with a {{}} where the label goes"
                )
            pre["hypothesis_template"] = hypothesis_template
        if tokenizer_kwargs is not None:
            if not isinstance(tokenizer_kwargs, dict):
                raise ConfigError(f"tokenizer_kwargs={tokenizer_kwargs!r} must be a dict of tokenizer arguments")
            pre["tokenizer_kwargs"] = dict(tokenizer_kwargs)
        return pre, {}, {}

    def _is_siglip(self) -> bool:
        return "siglip" in str(getattr(self.model.config, "model_type", ""))

    def preprocess(  # type: ignore[override]
        self,
        image: Any,
        candidate_labels: list[str] | None = None,
        hypothesis_template: str = "This is a photo of {}.",
        tokenizer_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if candidate_labels is None:
            raise ConfigError(
                "zero-shot-image-classification needs candidate_labels: pipe(image, candidate_labels=['cat', 'dog'])"
            )
        inputs = super().preprocess(image)
        settings: dict[str, Any] = {"padding": True}
        if self._is_siglip():
            settings.update(padding="max_length", max_length=64, truncation=True)
        settings.update(tokenizer_kwargs or {})
        texts = [hypothesis_template.format(label) for label in candidate_labels]
        inputs["text_inputs"] = dict(self.tokenizer(texts, return_tensors="pt", **settings))
        inputs["candidate_labels"] = candidate_labels
        return inputs

    def forward_batch(self, rows: list[Any], forward_params: dict[str, Any]) -> list[dict[str, Any]]:
        # Each image has its own texts: images are run one at a time rather than padded into one batch.
        return [
            super(ZeroShotImageClassificationPipeline, self).forward_batch([row], forward_params)[0] for row in rows
        ]

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        text_inputs = model_inputs["text_inputs"]
        outputs = self.model(pixel_values=model_inputs["pixel_values"], **text_inputs)
        return {"logits": outputs.logits_per_image, "candidate_labels": model_inputs["candidate_labels"]}

    def postprocess(self, model_outputs: dict[str, Any]) -> list[dict[str, Any]]:
        logits = model_outputs["logits"][0].float()
        scores = logits.sigmoid() if self._is_siglip() else logits.softmax(dim=-1)
        pairs = zip(scores.tolist(), model_outputs["candidate_labels"])
        return [{"score": score, "label": label} for score, label in sorted(pairs, key=lambda pair: -pair[0])]

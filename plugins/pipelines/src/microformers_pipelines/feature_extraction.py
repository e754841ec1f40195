"""``feature-extraction``: the model's last hidden states, or one pooled sentence embedding per input."""

from __future__ import annotations

from typing import Any

import torch

from microformers import ConfigError

from ._common import check_text
from .base import Pipeline

POOLING = ("none", "mean", "cls")


class FeatureExtractionPipeline(Pipeline):
    """``pipe(text)`` -> ``[[[float] * hidden] * tokens]`` (as the reference: a batch dimension of 1).

    ``pooling="mean"`` (mask-aware mean over tokens) or ``"cls"`` returns one ``[float] * hidden`` vector per
    input instead, L2-normalised with ``normalize=True`` (sentence-transformers' embeddings for
    all-MiniLM-L6-v2 are ``pooling="mean", normalize=True``). ``return_tensors=True`` returns torch tensors.
    """

    def _sanitize_parameters(
        self,
        truncation: Any = None,
        tokenize_kwargs: dict[str, Any] | None = None,
        return_tensors: bool | None = None,
        pooling: str | None = None,
        normalize: bool | None = None,
        **tokenizer_kwargs: Any,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        preprocess = {**(tokenize_kwargs or {}), **tokenizer_kwargs}
        if truncation is not None:
            if "truncation" in preprocess:
                raise ConfigError("feature-extraction: truncation given twice (as an option and in tokenize_kwargs)")
            preprocess["truncation"] = truncation
        postprocess: dict[str, Any] = {}
        if return_tensors is not None:
            postprocess["return_tensors"] = return_tensors
        if pooling is not None:
            if pooling not in POOLING:
                raise ConfigError(f"feature-extraction: pooling={pooling!r}; use one of {', '.join(POOLING)}")
            postprocess["pooling"] = pooling
        if normalize is not None:
            postprocess["normalize"] = bool(normalize)
        return preprocess, {}, postprocess

    def preprocess(self, text: Any, **tokenizer_kwargs: Any) -> dict[str, Any]:
        check_text(text, "feature-extraction")
        return dict(self.tokenizer(text, return_tensors="pt", **tokenizer_kwargs))

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        return token_states(self.model, model_inputs)

    def postprocess(
        self,
        model_outputs: dict[str, Any],
        return_tensors: bool = False,
        pooling: str = "none",
        normalize: bool = False,
    ) -> Any:
        hidden = model_outputs["hidden_states"]
        if pooling == "none":
            if normalize:
                raise ConfigError("feature-extraction: normalize=True needs pooling='mean' or 'cls'")
            return hidden if return_tensors else hidden.tolist()
        hidden = hidden[0].float()
        if pooling == "cls":
            vector = hidden[0]
        else:
            mask = model_outputs["attention_mask"][0].to(hidden.dtype).unsqueeze(-1)
            vector = (hidden * mask).sum(0) / mask.sum().clamp(min=1e-9)
        if normalize:
            vector = torch.nn.functional.normalize(vector, p=2, dim=0)
        return vector if return_tensors else vector.tolist()


def token_states(model: Any, model_inputs: dict[str, Any]) -> dict[str, Any]:
    """The model's last hidden states and the attention mask to pool them with (all ones when none was given)."""
    outputs = model(**model_inputs)
    hidden = outputs["last_hidden_state"] if "last_hidden_state" in outputs else outputs[0]
    mask = model_inputs.get("attention_mask")
    if mask is None:
        mask = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    return {"hidden_states": hidden, "attention_mask": mask}

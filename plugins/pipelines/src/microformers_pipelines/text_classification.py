"""``text-classification`` (alias ``sentiment-analysis``): labels and scores for a text or a text pair."""

from __future__ import annotations

from typing import Any

import numpy as np

from microformers import ConfigError

from ._common import check_choice, check_text, labels_of, logits_of, model_inputs, sigmoid, softmax
from .base import Pipeline

FUNCTIONS = ("softmax", "sigmoid", "none")
_UNSET: Any = ""


class TextClassificationPipeline(Pipeline):
    """``pipe("text")``, ``pipe({"text": ..., "text_pair": ...})`` or ``pipe([...])``.

    Without ``top_k`` a string gives ``[{"label", "score"}]`` (the best label) and each list item one
    ``{"label", "score"}``; with ``top_k=k`` (``None``: all) each input gives its ``k`` best, best first.
    ``function_to_apply`` is ``"softmax"``, ``"sigmoid"`` or ``"none"`` (default: from the config's
    ``problem_type`` / ``num_labels``).
    """

    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        return isinstance(inputs, (str, dict)) or _is_pair(inputs) or super().is_single_input(inputs, preprocess_params)

    def _sanitize_parameters(
        self, function_to_apply: str | None = None, top_k: Any = _UNSET, **tokenizer_kwargs: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        postprocess: dict[str, Any] = {}
        if top_k is not _UNSET:
            if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
                raise ConfigError(f"text-classification: top_k={top_k!r}; pass a positive integer or None (all)")
            postprocess["top_k"] = top_k
            postprocess["legacy"] = False
        if function_to_apply is not None:
            postprocess["function_to_apply"] = check_choice(
                function_to_apply, "text-classification", "function_to_apply", FUNCTIONS
            )
        return tokenizer_kwargs, {}, postprocess

    def __call__(self, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = super().__call__(inputs, *args, **kwargs)
        if isinstance(inputs, str) and "top_k" not in kwargs and "top_k" not in self._postprocess_params:
            return [result]
        return result

    def preprocess(self, inputs: Any, **tokenizer_kwargs: Any) -> dict[str, Any]:
        task = "text-classification"
        if isinstance(inputs, dict):
            unknown = set(inputs) - {"text", "text_pair"}
            if "text" not in inputs or unknown:
                raise ConfigError(
                    f'{task}: a text pair is {{"text": ..., "text_pair": ...}}, got keys {sorted(inputs)}'
                )
            text = check_text(inputs["text"], task, "text")
            pair = inputs.get("text_pair")
            if pair is not None:
                check_text(pair, task, "text_pair")
            return dict(self.tokenizer(text, pair, return_tensors="pt", **tokenizer_kwargs))
        if _is_pair(inputs):
            text, pair = inputs[0]
            return dict(
                self.tokenizer(
                    check_text(text, task), check_text(pair, task, "text_pair"), return_tensors="pt", **tokenizer_kwargs
                )
            )
        if isinstance(inputs, (list, tuple)):
            raise ConfigError(f'{task}: to classify a text pair pass {{"text": "...", "text_pair": "..."}}')
        return dict(self.tokenizer(check_text(inputs, task), return_tensors="pt", **tokenizer_kwargs))

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return {"logits": logits_of(self.model(**model_inputs(self.tokenizer, inputs)))}

    def postprocess(
        self,
        model_outputs: dict[str, Any],
        function_to_apply: str | None = None,
        top_k: int | None = 1,
        legacy: bool = True,
    ) -> Any:
        config = self.model.config
        id2label = labels_of(self.model, "text-classification")
        if function_to_apply is None:
            problem = getattr(config, "problem_type", None)
            if problem == "regression":
                function_to_apply = "none"
            elif problem == "multi_label_classification" or len(id2label) == 1:
                function_to_apply = "sigmoid"
            else:
                function_to_apply = "softmax"
        logits = model_outputs["logits"][0].float().numpy().astype(np.float32)
        scores = {"sigmoid": sigmoid, "softmax": softmax}.get(function_to_apply, lambda x: x)(logits)
        if legacy and top_k == 1:
            best = int(scores.argmax())
            return {"label": id2label[best], "score": float(scores[best])}
        ranked = [{"label": id2label[i], "score": float(score)} for i, score in enumerate(scores)]
        if not legacy:
            ranked.sort(key=lambda entry: entry["score"], reverse=True)
            if top_k is not None:
                ranked = ranked[:top_k]
        return ranked


def _is_pair(inputs: Any) -> bool:
    """``["text", "pair"]`` given as one input (a list holding one such list, as the reference accepts)."""
    if isinstance(inputs, (list, tuple)) and len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        return len(inputs[0]) == 2 and all(isinstance(x, str) for x in inputs[0])
    return False

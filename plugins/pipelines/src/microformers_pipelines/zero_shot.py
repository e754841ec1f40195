"""``zero-shot-classification``: score candidate labels with an NLI model (premise = text, hypothesis = label)."""

from __future__ import annotations

from typing import Any

import numpy as np

from microformers import ConfigError

from ._common import check_text, logits_of, model_inputs
from .base import ChunkPipeline

TASK = "zero-shot-classification"


class ZeroShotClassificationPipeline(ChunkPipeline):
    """``pipe(text, candidate_labels=["a", "b"], hypothesis_template="This example is {}.", multi_label=False)``
    -> ``{"sequence", "labels", "scores"}`` with labels best first. Single-label scores are a softmax of the
    entailment logits over the labels; ``multi_label=True`` (or one label) scores each label on its own
    (entailment vs contradiction). The model's ``config.label2id`` must name an ``entailment`` label."""

    def _sanitize_parameters(
        self,
        candidate_labels: Any = None,
        hypothesis_template: str | None = None,
        multi_label: bool | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        preprocess: dict[str, Any] = {}
        if candidate_labels is not None:
            preprocess["candidate_labels"] = _parse_labels(candidate_labels)
        if hypothesis_template is not None:
            preprocess["hypothesis_template"] = hypothesis_template
        postprocess = {} if multi_label is None else {"multi_label": bool(multi_label)}
        return preprocess, {}, postprocess

    def __call__(self, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and "candidate_labels" not in kwargs:
            kwargs["candidate_labels"], args = args[0], ()
        return super().__call__(inputs, *args, **kwargs)

    @property
    def entailment_id(self) -> int:
        for label, index in (getattr(self.model.config, "label2id", None) or {}).items():
            if str(label).lower().startswith("entail"):
                return int(index)
        raise ConfigError(
            f"{TASK}: the model's config.label2id {getattr(self.model.config, 'label2id', None)} has no "
            "'entailment' label; use an NLI model (labels like entailment / neutral / contradiction)"
        )

    def preprocess(
        self, sequence: Any, candidate_labels: list[str] | None = None, hypothesis_template: str = "This example is {}."
    ) -> Any:
        check_text(sequence, TASK, "sequence")
        if not candidate_labels:
            raise ConfigError(f"{TASK}: pass candidate_labels=[...] (or a comma-separated string)")
        if hypothesis_template.format(candidate_labels[0]) == hypothesis_template:
            raise ConfigError(f"{TASK}: hypothesis_template={hypothesis_template!r} has no {{}} where the label goes")
        self.entailment_id  # noqa: B018 - fail before running the model when the labels do not fit
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        for label in candidate_labels:
            pair = [[sequence, hypothesis_template.format(label)]]
            try:
                encoded = self.tokenizer(pair, return_tensors="pt", padding=True, truncation="only_first")
            except Exception as exc:  # the hypothesis alone is longer than the model: keep it whole
                if "too short" not in str(exc) and "truncat" not in str(exc).lower():
                    raise
                encoded = self.tokenizer(pair, return_tensors="pt", padding=True, truncation=False)
            yield {"candidate_label": label, "sequence": sequence, **dict(encoded)}

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        logits = logits_of(self.model(**model_inputs(self.tokenizer, inputs)))
        return {"candidate_label": inputs["candidate_label"], "sequence": inputs["sequence"], "logits": logits}

    def postprocess(self, outputs: list[dict[str, Any]], multi_label: bool = False) -> dict[str, Any]:
        labels = [output["candidate_label"] for output in outputs]
        logits = np.concatenate([output["logits"].float().numpy() for output in outputs])  # (labels, classes)
        entail = self.entailment_id
        if multi_label or len(labels) == 1:
            contradiction = -1 if entail == 0 else 0
            pair = logits[:, [contradiction, entail]]
            scores = np.exp(pair) / np.exp(pair).sum(-1, keepdims=True)
            scores = scores[:, 1]
        else:
            scores = np.exp(logits[:, entail]) / np.exp(logits[:, entail]).sum()
        order = list(reversed(scores.argsort()))
        return {
            "sequence": outputs[0]["sequence"],
            "labels": [labels[i] for i in order],
            "scores": [float(scores[i]) for i in order],
        }


def _parse_labels(labels: Any) -> list[str]:
    if isinstance(labels, str):
        labels = [label.strip() for label in labels.split(",") if label.strip()]
    labels = list(labels)
    if not labels or not all(isinstance(label, str) and label.strip() for label in labels):
        raise ConfigError(f"{TASK}: candidate_labels={labels!r}; pass non-empty label strings")
    return labels

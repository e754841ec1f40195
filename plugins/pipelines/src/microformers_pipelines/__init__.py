"""microformers-pipelines: the built-in pipeline tasks, registered through the ``register_pipelines`` hook."""

from __future__ import annotations

TASKS: tuple[str, ...] = (
    "text-generation",
    "fill-mask",
    "text-classification",
    "token-classification",
    "question-answering",
    "feature-extraction",
    "zero-shot-classification",
)

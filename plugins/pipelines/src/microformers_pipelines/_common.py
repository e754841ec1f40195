"""Helpers shared by the tasks: input checks, score functions, model-input selection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from microformers import ConfigError


def check_text(value: Any, task: str, what: str = "input") -> str:
    """A non-empty string, or an error naming the task and the argument."""
    if not isinstance(value, str):
        raise ConfigError(f"{task}: the {what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ConfigError(f"{task}: the {what} is an empty string; pass some text")
    return value


def check_choice(value: Any, task: str, name: str, allowed: tuple[str, ...]) -> str:
    """``value`` (a string or an enum member), lower-cased, when it is one of ``allowed``; else an error."""
    choice = str(getattr(value, "value", value)).lower()
    if choice not in allowed:
        raise ConfigError(f"{task}: {name}={value!r}; use one of {', '.join(allowed)}")
    return choice


def softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - values.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def sigmoid(values: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-values))


def model_inputs(tokenizer: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``inputs`` the model takes (the tokenizer's ``model_input_names``)."""
    names = getattr(tokenizer, "model_input_names", None) or ["input_ids", "token_type_ids", "attention_mask"]
    return {name: inputs[name] for name in names if name in inputs}


def logits_of(outputs: Any) -> Any:
    return outputs["logits"] if isinstance(outputs, Mapping) else outputs[0]


def unknown_options(task: str, options: Mapping[str, Any]) -> None:
    if options:
        raise ConfigError(f"{task}: unknown option(s) {', '.join(sorted(options))}")


def labels_of(model: Any, task: str) -> dict[int, str]:
    id2label = getattr(getattr(model, "config", None), "id2label", None)
    if not id2label:
        raise ConfigError(f"{task}: the model's config has no id2label; set config.id2label = {{0: 'LABEL', ...}}")
    return {int(k): v for k, v in id2label.items()}

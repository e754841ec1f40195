"""Training losses shared by the model heads (the reference implementation's definitions).

``-100`` marks a label to ignore everywhere, as in the reference. Logits are upcast to float32 first so
half-precision models get the same loss as full-precision ones.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from microformers.errors import ConfigError

IGNORE_INDEX = -100
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy over every row of ``logits`` whose label is not ``-100``.

    ``logits`` is ``(..., num_classes)`` and ``labels`` the matching ``(...)``: masked LM and token
    classification (one label per token), next-sentence prediction (one per sequence).
    """
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels.to(logits.device).reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


def causal_lm_loss(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Next-token cross entropy: position ``t`` predicts ``labels[t + 1]``; ``-100`` labels are ignored.

    With ``num_items_in_batch`` (gradient accumulation) the summed loss is divided by it instead of averaged.
    """
    logits = logits.float()
    shifted = F.pad(labels.to(logits.device), (0, 1), value=IGNORE_INDEX)[..., 1:]
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), shifted.reshape(-1), ignore_index=IGNORE_INDEX, reduction=reduction
    )
    return loss / num_items_in_batch if num_items_in_batch is not None else loss


def sequence_classification_loss(logits: torch.Tensor, labels: torch.Tensor, config: Any) -> torch.Tensor:
    """MSE, cross entropy or binary cross entropy as ``config.problem_type`` says.

    Without a ``problem_type``: one label means regression, integer labels single-label
    classification, float labels multi-label classification.
    """
    num_labels = config.num_labels
    labels = labels.to(logits.device)
    problem_type = config.problem_type
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    if problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(logits.squeeze().float(), labels.squeeze().float())
        return F.mse_loss(logits.float(), labels.float())
    if problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, num_labels).float(), labels.view(-1))
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())
    raise ConfigError(
        f"problem_type={problem_type!r} in the model config is not one of {', '.join(PROBLEM_TYPES)}; "
        "set config.problem_type to one of them or to None to infer it from the labels"
    )


def span_loss(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    start_positions: torch.Tensor,
    end_positions: torch.Tensor,
) -> torch.Tensor:
    """Mean of the start and end cross entropies (extractive QA); positions outside the sequence are ignored."""
    length = start_logits.shape[1]
    start = start_positions.to(start_logits.device).reshape(-1).clamp(0, length)
    end = end_positions.to(end_logits.device).reshape(-1).clamp(0, length)
    start_loss = F.cross_entropy(start_logits.float(), start, ignore_index=length)
    end_loss = F.cross_entropy(end_logits.float(), end, ignore_index=length)
    return (start_loss + end_loss) / 2

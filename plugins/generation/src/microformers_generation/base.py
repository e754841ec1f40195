"""Base classes for logits processors and stopping criteria (what ``generate(logits_processor=...,
stopping_criteria=...)`` accepts, and what third-party processors and strategies build on).

A logits processor maps ``(input_ids, scores)`` to new scores; a stopping criterion says which rows
of a batch are done after the latest token. ``microformers.LogitsProcessor`` and friends resolve here.
"""

from __future__ import annotations

from typing import Any

import torch


class LogitsProcessor:
    """Turns next-token ``scores`` ``(batch, vocab)`` into new scores, given the ``input_ids`` so far.

    Implementations return a new tensor (they must not modify ``scores`` in place: the caller may
    keep the unprocessed logits).
    """

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(input_ids, scores)")


class LogitsProcessorList(list):
    """Applies its processors in order."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.FloatTensor:
        for processor in self:
            scores = processor(input_ids, scores, **kwargs) if kwargs else processor(input_ids, scores)
        return scores


class StoppingCriteria:
    """Given ``input_ids`` ``(batch, length)`` including the newest token, say which rows are done.

    Returns a bool tensor ``(batch,)``. ``scores`` is the tuple of processed scores so far when the
    caller keeps them (``output_scores=True``), else ``None``.
    """

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(input_ids, scores)")


class StoppingCriteriaList(list):
    """A row is done when any criterion says so."""

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        is_done: torch.Tensor | None = None
        for criterion in self:
            result = criterion(input_ids, scores, **kwargs)
            is_done = result if is_done is None else is_done | result
        if is_done is None:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return is_done

    @property
    def max_length(self) -> int | None:
        """The ``max_length`` of the first criterion that has one (the length cap of the sequences)."""
        for criterion in self:
            value = getattr(criterion, "max_length", None)
            if value is not None:
                return int(value)
        return None

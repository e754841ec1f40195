"""Base classes for logits processors: functions from ``(input_ids, scores)`` to new scores.

The concrete processors (temperature, top-k, top-p, repetition penalty ...) come from the
``microformers-generation`` plugin; anything following this interface can be passed to
``generate(logits_processor=[...])``.
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

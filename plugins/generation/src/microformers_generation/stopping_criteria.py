"""Stopping criteria: maximum length, end-of-sequence tokens, stop strings, wall-clock time."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from microformers import GenerationError

from .base import StoppingCriteria


class MaxLengthCriteria(StoppingCriteria):
    """Done once the sequences (prompt included) are ``max_length`` tokens long."""

    def __init__(self, max_length: int) -> None:
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise GenerationError(f"max_length={max_length!r} must be a positive integer")
        self.max_length = max_length

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        done = input_ids.shape[-1] >= self.max_length
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


class EosTokenCriteria(StoppingCriteria):
    """Done when the newest token is any of the ``eos_token_id`` ids."""

    def __init__(self, eos_token_id: int | Sequence[int] | torch.Tensor) -> None:
        if isinstance(eos_token_id, torch.Tensor):
            ids = [int(t) for t in eos_token_id.flatten().tolist()]
        elif isinstance(eos_token_id, int):
            ids = [eos_token_id]
        else:
            ids = [int(t) for t in eos_token_id]
        if not ids:
            raise GenerationError("eos_token_id must name at least one token")
        self.eos_token_id = torch.tensor(ids, dtype=torch.long)

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        if self.eos_token_id.device != input_ids.device:
            self.eos_token_id = self.eos_token_id.to(input_ids.device)
        last = input_ids[:, -1]
        if self.eos_token_id.shape[0] == 1:
            return last == self.eos_token_id[0]
        return torch.isin(last, self.eos_token_id)


class MaxTimeCriteria(StoppingCriteria):
    """Done (all rows) once ``max_time`` seconds have passed since ``initial_timestamp`` (default: creation)."""

    def __init__(self, max_time: float, initial_timestamp: float | None = None) -> None:
        if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or not max_time > 0:
            raise GenerationError(f"max_time={max_time!r} must be a positive number of seconds")
        self.max_time = float(max_time)
        self.initial_timestamp = time.time() if initial_timestamp is None else initial_timestamp

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        done = time.time() - self.initial_timestamp > self.max_time
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


class StopStringCriteria(StoppingCriteria):
    """Done when the text ends in one of ``stop_strings``, with the newest token taking part in it.

    The newest token may run past the end of the stop string ("st" + "opped" stops on "stop"), but a
    stop string that ended before the newest token does not count again. Only the tail of each row
    is decoded, through ``tokenizer.decode``: enough tokens to spell the longest stop string even
    at one byte per token.
    """

    def __init__(self, tokenizer: Any, stop_strings: str | Sequence[str]) -> None:
        if tokenizer is None or not hasattr(tokenizer, "decode"):
            raise GenerationError(
                "stop_strings need the model's tokenizer to read the text: pass tokenizer=tokenizer to generate()"
            )
        strings = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings)
        if not strings or not all(isinstance(s, str) and s for s in strings):
            raise GenerationError(f"stop_strings={stop_strings!r} must be a string or a list of non-empty strings")
        self.tokenizer = tokenizer
        self.stop_strings = strings
        self.tail_tokens = 4 * max(len(s.encode("utf-8")) for s in strings) + 2

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        rows = input_ids[:, -self.tail_tokens :].tolist()
        done = [self._row_done(row) for row in rows]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    def _row_done(self, tail: list[int]) -> bool:
        text = self.tokenizer.decode(tail)
        before = self.tokenizer.decode(tail[:-1]) if len(tail) > 1 else ""
        newest_starts = _common_prefix_length(before, text)
        for stop in self.stop_strings:
            if text.find(stop, max(0, newest_starts - len(stop) + 1)) != -1:
                return True
        return False


def _common_prefix_length(a: str, b: str) -> int:
    """Where two decodings start to differ (where the newest token's text begins)."""
    for index, (char_a, char_b) in enumerate(zip(a, b)):
        if char_a != char_b:
            return index
    return min(len(a), len(b))

"""Logits processors: penalties and constraints (all strategies) and sampling warpers (``do_sample``).

Each returns a new tensor and leaves its input alone. Values that do not depend on the step (the
eos mask, banned single tokens) are built once, on first use, when the vocabulary size is known.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from microformers import GenerationError

from .base import LogitsProcessor

NEG_INF = -float("inf")


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GenerationError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


def _token_list(name: str, tokens: int | Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        return [int(t) for t in tokens.flatten().tolist()]
    if isinstance(tokens, int):
        return [tokens]
    values = list(tokens)
    if not values or not all(isinstance(t, int) and t >= 0 for t in values):
        raise GenerationError(f"{name}={tokens!r} must be a token id or a non-empty list of token ids")
    return values


class _TokenMask:
    """A cached ``(vocab,)`` boolean mask of some token ids, per device and vocabulary size."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self._mask: torch.Tensor | None = None

    def get(self, scores: torch.Tensor) -> torch.Tensor:
        mask = self._mask
        if mask is None or mask.shape[0] != scores.shape[-1] or mask.device != scores.device:
            mask = torch.zeros(scores.shape[-1], dtype=torch.bool, device=scores.device)
            mask[[t for t in self.tokens if t < scores.shape[-1]]] = True
            self._mask = mask
        return mask


# -- penalties and constraints ------------------------------------------------------------------
class RepetitionPenaltyLogitsProcessor(LogitsProcessor):
    """Divides positive / multiplies negative scores of tokens already present (CTRL's penalty).

    ``prompt_ignore_length`` (an int, or one per row) skips that many leading positions: left padding.
    """

    def __init__(self, penalty: float, prompt_ignore_length: int | torch.Tensor | None = None) -> None:
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not penalty > 0:
            raise GenerationError(f"repetition_penalty={penalty!r} must be a positive number (1.0 = off)")
        self.penalty = float(penalty)
        self.prompt_ignore_length = prompt_ignore_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        vocab = scores.shape[-1]
        ignore = self.prompt_ignore_length
        if isinstance(ignore, int) and ignore:
            input_ids = input_ids[:, ignore:]
        elif isinstance(ignore, torch.Tensor):
            if ignore.shape[0] != input_ids.shape[0]:
                raise GenerationError(
                    f"repetition penalty: prompt_ignore_length has {ignore.shape[0]} rows but the batch has "
                    f"{input_ids.shape[0]}"
                )
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
            # ignored positions point at an extra column that is cut off again below
            input_ids = input_ids.masked_fill(positions[None, :] < ignore.to(input_ids.device)[:, None], vocab)
        widened = torch.nn.functional.pad(scores, (0, 1))
        index = input_ids.clamp(max=vocab)
        seen = widened.gather(1, index)
        penalised = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)
        return widened.scatter(1, index, penalised)[:, :vocab]


class NoRepeatNGramLogitsProcessor(LogitsProcessor):
    """Bans any token that would repeat an n-gram already in the sequence."""

    def __init__(self, ngram_size: int) -> None:
        self.ngram_size = _positive_int("no_repeat_ngram_size", ngram_size)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        n = self.ngram_size
        length = input_ids.shape[-1]
        if length < n:
            return scores
        vocab = scores.shape[-1]
        windows = input_ids.unfold(1, n, 1)  # (batch, length - n + 1, n)
        current_prefix = input_ids[:, length - n + 1 :]
        repeats = (windows[..., :-1] == current_prefix[:, None, :]).all(dim=-1)
        banned_columns = torch.where(repeats, windows[..., -1].clamp(max=vocab), vocab)
        banned = torch.zeros((scores.shape[0], vocab + 1), dtype=torch.bool, device=scores.device)
        banned.scatter_(1, banned_columns, True)
        return scores.masked_fill(banned[:, :vocab], NEG_INF)


class NoBadWordsLogitsProcessor(LogitsProcessor):
    """Bans the last token of each ``bad_words_ids`` sequence when the rest of it was just generated.

    A bad "word" that is exactly one eos token is dropped (generation must be able to end).
    """

    def __init__(self, bad_words_ids: list[list[int]], eos_token_id: int | Sequence[int] | None = None) -> None:
        if not isinstance(bad_words_ids, list) or not bad_words_ids:
            raise GenerationError(f"bad_words_ids={bad_words_ids!r} must be a non-empty list of lists of token ids")
        for word in bad_words_ids:
            if not isinstance(word, list) or not word or not all(isinstance(t, int) and t >= 0 for t in word):
                raise GenerationError(f"bad_words_ids entry {word!r} must be a non-empty list of token ids")
        eos = [] if eos_token_id is None else _token_list("eos_token_id", eos_token_id)
        words = [w for w in bad_words_ids if not (len(w) == 1 and w[0] in eos)]
        self.single = _TokenMask([w[0] for w in words if len(w) == 1])
        self.multi = [(torch.tensor(w[:-1]), w[-1]) for w in words if len(w) > 1]
        self._has_single = any(len(w) == 1 for w in words)
        self._checked_vocab: int | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        vocab = scores.shape[-1]
        if self._checked_vocab != vocab:
            largest = max(
                [int(p.max()) for p, _ in self.multi] + [t for _, t in self.multi] + self.single.tokens, default=-1
            )
            if largest >= vocab:
                raise GenerationError(f"bad_words_ids contains token {largest}, outside the vocabulary of {vocab}")
            self._checked_vocab = vocab
        banned = torch.zeros_like(scores, dtype=torch.bool)
        if self._has_single:
            banned |= self.single.get(scores)
        for prefix, last in self.multi:
            if prefix.shape[0] > input_ids.shape[1]:
                continue
            matches = (input_ids[:, -prefix.shape[0] :] == prefix.to(input_ids.device)).all(dim=-1)
            banned[:, last] |= matches
        return scores.masked_fill(banned, NEG_INF)


class MinLengthLogitsProcessor(LogitsProcessor):
    """Forbids eos while the sequences (prompt included) are shorter than ``min_length``."""

    def __init__(self, min_length: int, eos_token_id: int | Sequence[int] | torch.Tensor) -> None:
        self.min_length = _positive_int("min_length", min_length, minimum=0)
        self.eos = _TokenMask(_token_list("eos_token_id", eos_token_id))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[-1] >= self.min_length:
            return scores
        return scores.masked_fill(self.eos.get(scores), NEG_INF)


class MinNewTokensLengthLogitsProcessor(LogitsProcessor):
    """Forbids eos until ``min_new_tokens`` tokens follow the prompt of length ``prompt_length_to_skip``."""

    def __init__(
        self, prompt_length_to_skip: int, min_new_tokens: int, eos_token_id: int | Sequence[int] | torch.Tensor
    ) -> None:
        self.prompt_length_to_skip = _positive_int("prompt_length_to_skip", prompt_length_to_skip, minimum=0)
        self.min_new_tokens = _positive_int("min_new_tokens", min_new_tokens, minimum=0)
        self.eos = _TokenMask(_token_list("eos_token_id", eos_token_id))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[-1] - self.prompt_length_to_skip >= self.min_new_tokens:
            return scores
        return scores.masked_fill(self.eos.get(scores), NEG_INF)


class SuppressTokensLogitsProcessor(LogitsProcessor):
    """Never generates the given tokens."""

    def __init__(self, suppress_tokens: Sequence[int]) -> None:
        self.tokens = _TokenMask(_token_list("suppress_tokens", suppress_tokens))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return scores.masked_fill(self.tokens.get(scores), NEG_INF)


class LogitNormalization(LogitsProcessor):
    """Turns scores into log-probabilities (``renormalize_logits=True``; runs last)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return scores.log_softmax(dim=-1)


# -- sampling warpers -----------------------------------------------------------------------------
class TemperatureLogitsWarper(LogitsProcessor):
    """Divides scores by ``temperature`` (< 1 sharpens, > 1 flattens the distribution)."""

    def __init__(self, temperature: float) -> None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
            hint = " For deterministic output use do_sample=False." if temperature == 0 else ""
            raise GenerationError(f"temperature={temperature!r} must be a positive number.{hint}")
        self.temperature = float(temperature)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return scores / self.temperature


class TopKLogitsWarper(LogitsProcessor):
    """Keeps the ``top_k`` highest scores (ties at the boundary stay), at least ``min_tokens_to_keep``."""

    def __init__(self, top_k: int, filter_value: float = NEG_INF, min_tokens_to_keep: int = 1) -> None:
        self.top_k = max(_positive_int("top_k", top_k), _positive_int("min_tokens_to_keep", min_tokens_to_keep))
        self.filter_value = filter_value

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        k = min(self.top_k, scores.shape[-1])
        kth_best = torch.topk(scores, k, dim=-1).values[..., -1:]
        return scores.masked_fill(scores < kth_best, self.filter_value)


class TopPLogitsWarper(LogitsProcessor):
    """Nucleus filtering: keeps the smallest set of best tokens whose probability reaches ``top_p``."""

    def __init__(self, top_p: float, filter_value: float = NEG_INF, min_tokens_to_keep: int = 1) -> None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise GenerationError(f"top_p={top_p!r} must be in (0, 1]; 1.0 disables top-p filtering")
        self.top_p = float(top_p)
        self.filter_value = filter_value
        self.min_tokens_to_keep = _positive_int("min_tokens_to_keep", min_tokens_to_keep)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        ascending, order = torch.sort(scores, descending=False, dim=-1)
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        # drop the low tail whose total mass is at most 1 - top_p; the best tokens always survive
        drop_sorted = cumulative <= (1 - self.top_p)
        drop_sorted[..., -self.min_tokens_to_keep :] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        return scores.masked_fill(drop, self.filter_value)


class MinPLogitsWarper(LogitsProcessor):
    """Drops tokens whose probability is below ``min_p`` times the best token's probability."""

    def __init__(self, min_p: float, filter_value: float = NEG_INF, min_tokens_to_keep: int = 1) -> None:
        if isinstance(min_p, bool) or not isinstance(min_p, (int, float)) or not 0 <= min_p <= 1:
            raise GenerationError(f"min_p={min_p!r} must be in [0, 1]")
        self.min_p = float(min_p)
        self.filter_value = filter_value
        self.min_tokens_to_keep = _positive_int("min_tokens_to_keep", min_tokens_to_keep)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = scores.softmax(dim=-1)
        threshold = self.min_p * probs.amax(dim=-1, keepdim=True)
        drop = probs < threshold
        keep = torch.topk(probs, min(self.min_tokens_to_keep, probs.shape[-1]), dim=-1).indices
        drop.scatter_(-1, keep, False)
        return scores.masked_fill(drop, self.filter_value)


class TypicalLogitsWarper(LogitsProcessor):
    """Locally typical sampling: keeps the tokens whose surprisal is closest to the entropy, up to mass ``typical_p``."""

    def __init__(self, mass: float = 0.9, filter_value: float = NEG_INF, min_tokens_to_keep: int = 1) -> None:
        if isinstance(mass, bool) or not isinstance(mass, (int, float)) or not 0 < mass < 1:
            raise GenerationError(f"typical_p={mass!r} must be in (0, 1) (1.0 disables it)")
        self.mass = float(mass)
        self.filter_value = filter_value
        self.min_tokens_to_keep = _positive_int("min_tokens_to_keep", min_tokens_to_keep)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        log_probs = scores.log_softmax(dim=-1)
        entropy = -(log_probs * log_probs.exp()).nansum(-1, keepdim=True)
        distance = (-log_probs - entropy).abs()
        sorted_distance, order = torch.sort(distance, descending=False, dim=-1)
        cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
        cutoff = (cumulative < self.mass).sum(dim=-1).clamp_(max=sorted_distance.shape[-1] - 1)
        drop_sorted = sorted_distance > sorted_distance.gather(-1, cutoff[:, None])
        drop_sorted[..., : self.min_tokens_to_keep] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        return scores.masked_fill(drop, self.filter_value)

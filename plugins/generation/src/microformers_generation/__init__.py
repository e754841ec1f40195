"""microformers-generation: the standard decoding strategies, logits processors and stopping criteria."""

from __future__ import annotations

from .logits_process import (
    LogitNormalization,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)
from .stopping_criteria import EosTokenCriteria, MaxLengthCriteria, MaxTimeCriteria, StopStringCriteria

__all__ = [
    "EosTokenCriteria",
    "LogitNormalization",
    "MaxLengthCriteria",
    "MaxTimeCriteria",
    "MinLengthLogitsProcessor",
    "MinNewTokensLengthLogitsProcessor",
    "MinPLogitsWarper",
    "NoBadWordsLogitsProcessor",
    "NoRepeatNGramLogitsProcessor",
    "RepetitionPenaltyLogitsProcessor",
    "StopStringCriteria",
    "SuppressTokensLogitsProcessor",
    "TemperatureLogitsWarper",
    "TopKLogitsWarper",
    "TopPLogitsWarper",
    "TypicalLogitsWarper",
]

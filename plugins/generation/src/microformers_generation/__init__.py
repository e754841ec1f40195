"""microformers-generation: the standard decoding strategies, the preparation every strategy shares,
logits processors, stopping criteria and streamers."""

from __future__ import annotations

from microformers.lazy import lazy_exports

from .plugin import EXPORTS  # what ``microformers`` re-exports; the package offers more

_EXPORTS = {
    **EXPORTS,
    "IncrementalDecoder": "decoding",
    "Prepared": "prepare",
    "prepare": "prepare",
    "Strategy": "strategies",
    "AssistedDecoding": "assisted",
    "run_loop": "strategies",
    "build_logits_processor": "defaults",
    "build_stopping_criteria": "defaults",
    "merge_with_defaults": "defaults",
    **{
        name: "logits_process"
        for name in (
            "EncoderNoRepeatNGramLogitsProcessor",
            "EncoderRepetitionPenaltyLogitsProcessor",
            "EpsilonLogitsWarper",
            "EtaLogitsWarper",
            "ExponentialDecayLengthPenalty",
            "ForcedBOSTokenLogitsProcessor",
            "ForcedEOSTokenLogitsProcessor",
            "InfNanRemoveLogitsProcessor",
            "LogitNormalization",
            "PrefixConstrainedLogitsProcessor",
            "SequenceBiasLogitsProcessor",
            "SuppressTokensAtBeginLogitsProcessor",
            "UnbatchedClassifierFreeGuidanceLogitsProcessor",
            "WatermarkLogitsProcessor",
            "MinLengthLogitsProcessor",
            "MinNewTokensLengthLogitsProcessor",
            "MinPLogitsWarper",
            "NoBadWordsLogitsProcessor",
            "NoRepeatNGramLogitsProcessor",
            "RepetitionPenaltyLogitsProcessor",
            "SuppressTokensLogitsProcessor",
            "TemperatureLogitsWarper",
            "TopKLogitsWarper",
            "TopPLogitsWarper",
            "TypicalLogitsWarper",
        )
    },
    **{
        name: "stopping_criteria"
        for name in ("EosTokenCriteria", "MaxLengthCriteria", "MaxTimeCriteria", "StopStringCriteria")
    },
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

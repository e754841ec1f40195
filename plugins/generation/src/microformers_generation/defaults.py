"""The default logits processors and stopping criteria for a generation config.

The order follows the reference implementation, so processed scores match it: penalties and
constraints first, then the caller's processors, then (when sampling) temperature, top-k, top-p,
min-p and typical-p, and log-normalisation last. A caller's processor or criterion of the same
class as a default one replaces it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch

from microformers import GenerationConfig, GenerationError

from .base import LogitsProcessorList, StoppingCriteriaList
from .logits_process import (
    EncoderNoRepeatNGramLogitsProcessor,
    EncoderRepetitionPenaltyLogitsProcessor,
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    ExponentialDecayLengthPenalty,
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    InfNanRemoveLogitsProcessor,
    LogitNormalization,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
    UnbatchedClassifierFreeGuidanceLogitsProcessor,
    watermark_processor,
)
from .stopping_criteria import EosTokenCriteria, MaxLengthCriteria, MaxTimeCriteria, StopStringCriteria

logger = logging.getLogger("microformers")


def merge_with_defaults(defaults: Iterable[Any], custom: Iterable[Any] | None, list_type: type[list]) -> list:
    """Defaults with any of the same type replaced by the caller's one, then the caller's others appended."""
    custom = list(custom or ())
    merged = list_type()
    for default in defaults:
        replacement = next((c for c in custom if type(c) is type(default)), None)
        if replacement is not None:
            logger.warning(
                "generate() was given a %s although its settings already create one; the one passed in is used",
                type(default).__name__,
            )
        merged.append(replacement if replacement is not None else default)
    merged.extend(c for c in custom if not any(c is m for m in merged))
    return merged


def build_logits_processor(
    model: Any,
    config: GenerationConfig,
    *,
    input_ids_length: int,
    attention_mask: torch.Tensor | None = None,
    logits_processor: Iterable[Any] | None = None,
    prompt_ids: torch.Tensor | None = None,
    prefix_allowed_tokens_fn: Any = None,
    negative_prompt_ids: torch.Tensor | None = None,
    negative_prompt_attention_mask: torch.Tensor | None = None,
) -> LogitsProcessorList:
    """The processors ``config`` asks for, in the reference's order, with the caller's merged in.

    ``prompt_ids`` (the prompt before expansion for beams) feeds the ``encoder_*`` processors.
    """
    eos = config.eos_token_ids
    processors = LogitsProcessorList()
    if config.guidance_scale is not None and config.guidance_scale != 1:
        processors.append(
            UnbatchedClassifierFreeGuidanceLogitsProcessor(
                config.guidance_scale,
                model,
                unconditional_ids=negative_prompt_ids,
                unconditional_attention_mask=negative_prompt_attention_mask,
                use_cache=bool(config.use_cache),
            )
        )
    if config.sequence_bias is not None:
        processors.append(SequenceBiasLogitsProcessor(config.sequence_bias))
    if config.encoder_repetition_penalty is not None and config.encoder_repetition_penalty != 1.0:
        processors.append(EncoderRepetitionPenaltyLogitsProcessor(config.encoder_repetition_penalty, _ids(prompt_ids)))
    if config.repetition_penalty is not None and config.repetition_penalty != 1.0:
        padding = (attention_mask != 0).int().argmax(dim=1) if attention_mask is not None else None
        processors.append(RepetitionPenaltyLogitsProcessor(config.repetition_penalty, prompt_ignore_length=padding))
    if config.no_repeat_ngram_size:
        processors.append(NoRepeatNGramLogitsProcessor(config.no_repeat_ngram_size))
    if config.encoder_no_repeat_ngram_size:
        processors.append(EncoderNoRepeatNGramLogitsProcessor(config.encoder_no_repeat_ngram_size, _ids(prompt_ids)))
    if config.bad_words_ids is not None:
        processors.append(NoBadWordsLogitsProcessor(config.bad_words_ids, eos))
    if config.min_length and eos:
        processors.append(MinLengthLogitsProcessor(config.min_length, eos))
    if config.min_new_tokens and eos:
        processors.append(MinNewTokensLengthLogitsProcessor(input_ids_length, config.min_new_tokens, eos))
    if prefix_allowed_tokens_fn is not None:
        processors.append(PrefixConstrainedLogitsProcessor(prefix_allowed_tokens_fn, config.num_beams or 1))
    if config.forced_bos_token_id is not None:
        processors.append(ForcedBOSTokenLogitsProcessor(config.forced_bos_token_id))
    if config.forced_eos_token_id is not None:
        processors.append(ForcedEOSTokenLogitsProcessor(config.max_length, config.forced_eos_token_id))
    if config.remove_invalid_values:
        processors.append(InfNanRemoveLogitsProcessor())
    if config.exponential_decay_length_penalty is not None:
        if not eos:
            raise GenerationError("exponential_decay_length_penalty raises the eos score, but no eos_token_id is set")
        processors.append(ExponentialDecayLengthPenalty(config.exponential_decay_length_penalty, eos, input_ids_length))
    if config.suppress_tokens:
        processors.append(SuppressTokensLogitsProcessor(config.suppress_tokens))
    if config.begin_suppress_tokens:
        begin = input_ids_length if input_ids_length > 1 or config.forced_bos_token_id is None else input_ids_length + 1
        processors.append(SuppressTokensAtBeginLogitsProcessor(config.begin_suppress_tokens, begin))
    processors = merge_with_defaults(processors, logits_processor, LogitsProcessorList)

    if config.do_sample:
        # Beam sampling must leave a non-eos continuation for every beam.
        keep = (len(eos) + 1 if eos else 2) if (config.num_beams or 1) > 1 else 1
        if config.temperature is not None and config.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(config.temperature))
        if config.top_k:
            processors.append(TopKLogitsWarper(config.top_k, min_tokens_to_keep=keep))
        if config.top_p is not None and config.top_p < 1.0:
            processors.append(TopPLogitsWarper(config.top_p, min_tokens_to_keep=keep))
        if config.min_p is not None:
            processors.append(MinPLogitsWarper(config.min_p, min_tokens_to_keep=keep))
        if config.typical_p is not None and config.typical_p < 1.0:
            processors.append(TypicalLogitsWarper(config.typical_p, min_tokens_to_keep=keep))
        if config.epsilon_cutoff is not None and 0.0 < config.epsilon_cutoff < 1.0:
            processors.append(EpsilonLogitsWarper(config.epsilon_cutoff, min_tokens_to_keep=keep))
        if config.eta_cutoff is not None and 0.0 < config.eta_cutoff < 1.0:
            processors.append(EtaLogitsWarper(config.eta_cutoff, min_tokens_to_keep=keep))
    if config.watermarking_config is not None:  # after every other processor but normalisation, as the reference
        vocab = getattr(getattr(model, "config", None), "vocab_size", None)
        device = prompt_ids.device if prompt_ids is not None else torch.device("cpu")
        processors.append(watermark_processor(config.watermarking_config, vocab, device))
    if config.renormalize_logits:
        processors.append(LogitNormalization())
    return processors


def _ids(prompt_ids: torch.Tensor | None) -> torch.Tensor:
    if prompt_ids is None:
        raise GenerationError("encoder_repetition_penalty / encoder_no_repeat_ngram_size need the prompt's input_ids")
    return prompt_ids


def build_stopping_criteria(
    model: Any,
    config: GenerationConfig,
    *,
    tokenizer: Any = None,
    stopping_criteria: Iterable[Any] | None = None,
) -> StoppingCriteriaList:
    criteria = StoppingCriteriaList()
    if config.max_length is not None:
        criteria.append(MaxLengthCriteria(config.max_length))
    if config.max_time is not None:
        criteria.append(MaxTimeCriteria(config.max_time))
    if config.stop_strings is not None:
        if tokenizer is None:
            raise GenerationError(
                f"stop_strings={config.stop_strings!r} need the model's tokenizer to read the generated text: "
                "pass tokenizer=tokenizer to generate()"
            )
        criteria.append(StopStringCriteria(tokenizer, config.stop_strings))
    if config.eos_token_ids:
        criteria.append(EosTokenCriteria(config.eos_token_ids))
    return merge_with_defaults(criteria, stopping_criteria, StoppingCriteriaList)

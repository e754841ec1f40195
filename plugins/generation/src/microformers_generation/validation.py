"""``GenerationConfig.validate()``: the checks of every setting the standard strategies read.

The kernel declares ``GenerationConfig.validate`` and calls it for every ``generate``; this module is its
body (registered through ``register_implementations``), kept beside the strategies whose settings it checks.
"""

from __future__ import annotations

from typing import Any

from microformers import GenerationError


def validate(config: Any) -> None:
    """Raise :class:`GenerationError` naming the setting when values are invalid or contradict each other."""
    _check_int(config, "max_new_tokens", minimum=1)
    _check_int(config, "max_length", minimum=1)
    _check_int(config, "min_new_tokens", minimum=0)
    _check_int(config, "min_length", minimum=0)
    _check_int(config, "num_beams", minimum=1)
    _check_int(config, "num_return_sequences", minimum=1)
    _check_int(config, "top_k", minimum=0)
    _check_int(config, "no_repeat_ngram_size", minimum=0)
    if config.cache_implementation not in (None, "dynamic", "static"):
        raise GenerationError(
            f"cache_implementation={config.cache_implementation!r} is unknown; use 'dynamic' (default) or 'static'"
        )
    if config.compile_config is not None and not isinstance(config.compile_config, (bool, dict)):
        raise GenerationError("compile_config must be True/False or a dict of torch.compile options")
    if config.early_stopping not in (None, True, False, "never"):
        raise GenerationError(f"early_stopping={config.early_stopping!r} is invalid; use True, False or 'never'")
    if config.temperature is not None and not config.temperature > 0:
        hint = " For deterministic output use do_sample=False instead." if config.temperature == 0 else ""
        raise GenerationError(f"temperature={config.temperature!r} must be a positive number.{hint}")
    if config.top_p is not None and not 0 < config.top_p <= 1:
        raise GenerationError(f"top_p={config.top_p!r} must be in (0, 1]; 1.0 disables top-p filtering")
    if config.min_p is not None and not 0 <= config.min_p <= 1:
        raise GenerationError(f"min_p={config.min_p!r} must be in [0, 1]")
    if config.typical_p is not None and not 0 < config.typical_p <= 1:
        raise GenerationError(f"typical_p={config.typical_p!r} must be in (0, 1]; 1.0 disables typical-p filtering")
    if config.repetition_penalty is not None and not config.repetition_penalty > 0:
        raise GenerationError(f"repetition_penalty={config.repetition_penalty!r} must be positive (1.0 = off)")
    if config.max_time is not None and not config.max_time > 0:
        raise GenerationError(f"max_time={config.max_time!r} must be a positive number of seconds")
    if config.stop_strings is not None and not (
        isinstance(config.stop_strings, str)
        or (
            isinstance(config.stop_strings, (list, tuple))
            and all(isinstance(s, str) and s for s in config.stop_strings)
        )
    ):
        raise GenerationError(f"stop_strings={config.stop_strings!r} must be a string or a list of non-empty strings")
    if config.bad_words_ids is not None and not (
        isinstance(config.bad_words_ids, list)
        and config.bad_words_ids
        and all(isinstance(seq, list) and seq and all(_is_token(t) for t in seq) for seq in config.bad_words_ids)
    ):
        raise GenerationError(
            f"bad_words_ids={config.bad_words_ids!r} must be a non-empty list of non-empty lists of token ids"
        )
    for name in ("bos_token_id", "pad_token_id", "decoder_start_token_id"):
        value = getattr(config, name)
        if value is not None and not _is_token(value):
            raise GenerationError(f"{name}={value!r} must be a non-negative integer token id")
    eos = config.eos_token_id
    if eos is not None and not (
        _is_token(eos) or (isinstance(eos, (list, tuple)) and eos and all(_is_token(e) for e in eos))
    ):
        raise GenerationError(f"eos_token_id={eos!r} must be a token id or a non-empty list of token ids")
    if (
        config.max_length is not None
        and config.min_length is not None
        and config.max_new_tokens is None
        and config.min_length > config.max_length
    ):
        raise GenerationError(f"min_length={config.min_length} is larger than max_length={config.max_length}")
    if (
        config.max_new_tokens is not None
        and config.min_new_tokens is not None
        and config.min_new_tokens > config.max_new_tokens
    ):
        raise GenerationError(
            f"min_new_tokens={config.min_new_tokens} is larger than max_new_tokens={config.max_new_tokens}"
        )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_int(config: Any, name: str, minimum: int) -> None:
    value = getattr(config, name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GenerationError(f"{name}={value!r} must be an integer >= {minimum}")

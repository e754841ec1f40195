"""The checks of the settings the standard strategies read, contributed to ``GenerationConfig.validate``.

The kernel's ``validate`` checks the settings it reads itself (lengths, beams, cache, compile), then runs the
checks plugins register with ``register_generation_config_checks`` (this module's ``check_strategy_settings``),
then checks token ids and contradictions.
"""

from __future__ import annotations

from typing import Any

from microformers import GenerationError


def check_strategy_settings(config: Any) -> None:
    """The sampling, beam, penalty and stopping settings: raise :class:`GenerationError` naming the bad one."""
    if config.early_stopping not in (None, True, False, "never"):
        raise GenerationError(f"early_stopping={config.early_stopping!r} is invalid; use True, False or 'never'")
    if config.temperature is not None and not config.temperature > 0:
        hint = " For deterministic output use do_sample=False instead." if config.temperature == 0 else ""
        raise GenerationError(f"temperature={config.temperature!r} must be a positive number.{hint}")
    if config.top_p is not None and not 0 < config.top_p <= 1:
        hint = (
            " (top_p=0 would keep only the most likely token: use do_sample=False for that)"
            if config.top_p == 0
            else ""
        )
        raise GenerationError(f"top_p={config.top_p!r} must be in (0, 1]; 1.0 disables top-p filtering{hint}")
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


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

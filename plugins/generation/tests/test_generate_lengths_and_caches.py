"""Lengths and caches chosen by generate(): max_length clamped to the context (warning only past it), the static
cache sized for max_length, compile_config=True."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from generation_marked_tiny import marked_tiny as _marked_tiny
from generation_similarity import assert_same_generation


def _warnings_of(run: Any) -> tuple[Any, list[str]]:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("microformers")
    logger.addHandler(handler)
    try:
        result = run()
    finally:
        logger.removeHandler(handler)
    return result, [r.getMessage() for r in records if r.levelno >= logging.WARNING]


def test_lengths_up_to_the_context_need_no_warning() -> None:
    model = _marked_tiny()  # max_position_embeddings=64, default max_length 20
    prompt = torch.full((1, 50), 5)
    out, warnings = _warnings_of(lambda: model.generate(prompt))  # 50 + 20 is clamped to the context quietly
    assert out.shape[1] == 64 and warnings == []
    out, warnings = _warnings_of(lambda: model.generate(prompt, max_new_tokens=14))  # exactly the context
    assert out.shape[1] == 64 and warnings == []
    out, warnings = _warnings_of(lambda: model.generate(prompt, max_new_tokens=15))
    assert out.shape[1] == 64 and len(warnings) == 1 and "max_position_embeddings=64" in warnings[0]


def test_static_cache_is_sized_for_max_length_and_compile_config_true_compiles_with_defaults(
    model: Any, prompts: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[Any] = []
    make = model.make_static_cache
    monkeypatch.setattr(model, "make_static_cache", lambda length: sizes.append(length) or make(length))
    scored = {"return_dict_in_generate": True, "output_scores": True}
    expected = model.generate(**prompts["single"], max_new_tokens=3, cache_implementation="dynamic", **scored)
    static = model.generate(**prompts["single"], max_new_tokens=3, cache_implementation="static", **scored)
    # a static cache attends over its whole (masked) length: other shapes, so the same tokens up to a near tie
    assert_same_generation(static, expected, prompt_length=8)
    assert sizes == [prompts["single"]["input_ids"].shape[1] + 3]
    compiled: list[dict[str, Any]] = []
    monkeypatch.setattr(model, "compile_decode_step", lambda **kwargs: compiled.append(kwargs))
    model.generate(**prompts["single"], max_new_tokens=2, compile_config=True)
    assert compiled == [{}]

"""Entry point: registers the standard strategies, the checks of their settings and the names ``microformers``
re-exports (all lazily)."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

EXPORTS = {
    "LogitsProcessor": "base",
    "LogitsProcessorList": "base",
    "StoppingCriteria": "base",
    "StoppingCriteriaList": "base",
    "BaseStreamer": "streamers",
    "TextStreamer": "streamers",
    "TextIteratorStreamer": "streamers",
    "GenerateDecoderOnlyOutput": "outputs",
    "GenerateBeamDecoderOnlyOutput": "outputs",
    "GenerateEncoderDecoderOutput": "outputs",
    "GenerateBeamEncoderDecoderOutput": "outputs",
}


@hookimpl
def register_generation_strategies(register: Any) -> None:
    register("greedy", "microformers_generation.strategies:greedy", priority=0)
    register("sample", "microformers_generation.strategies:sample", priority=0)
    register("beam_search", "microformers_generation.strategies:beam_search", priority=0)
    register("custom_generate", "microformers_generation.custom:custom_generate", priority=0)
    # prompt_lookup_num_tokens: before the standard strategies, whose applies() also holds
    register("assisted", "microformers_generation.assisted:assisted", priority=10)


@hookimpl
def register_exports(register: Any) -> None:
    for name, module in EXPORTS.items():
        register(name, f"microformers_generation.{module}:{name}")


@hookimpl
def register_generation_config_checks(register: Any) -> None:
    register("standard-strategies", "microformers_generation.validation:check_strategy_settings")

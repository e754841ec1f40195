"""Entry point: registers the standard strategies with the kernel (imported lazily by reference)."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_generation_strategies(register: Any) -> None:
    register("greedy", "microformers_generation.strategies:greedy")
    register("sample", "microformers_generation.strategies:sample")
    register("beam_search", "microformers_generation.strategies:beam_search")

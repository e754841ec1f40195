"""Entry point of the test strategy plugin."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_generation_strategies(register: Any) -> None:
    register("least_likely", "microformers_test_strategy.strategy:least_likely", priority=10)

"""Entry point ``mytask``: registers the ``my-task`` pipeline (as a string, so discovery imports nothing)."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_pipelines(register: Any) -> None:
    register("my-task", "microformers_test_mytask.task:CharacterCountPipeline", aliases=("my-alias",))

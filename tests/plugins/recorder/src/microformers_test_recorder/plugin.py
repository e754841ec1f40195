"""Entry point ``test-recorder``: registers the ``recorder`` Trainer integration (no imports at discovery)."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_callbacks(register: Any) -> None:
    register("recorder", "microformers_test_recorder.callback:RecorderCallback")

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_cli_commands(register: Any) -> None:
    register(
        "serve", "microformers_serve.commands:serve_command", help="serve a model over an OpenAI-compatible HTTP API"
    )


@hookimpl
def register_attention_implementations(register: Any) -> None:
    # Per-row attention over unpadded keys, used by the serving engine's decode steps.
    register("serve_ragged", "microformers_serve.engine:ragged_attention")

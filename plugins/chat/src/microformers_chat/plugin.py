from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_cli_commands(register: Any) -> None:
    register("chat", "microformers_chat.commands:chat_command", help="chat with a model (default: the embedded one)")
    register("generate", "microformers_chat.commands:generate_command", help="answer one prompt and exit")

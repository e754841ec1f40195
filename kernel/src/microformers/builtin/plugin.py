"""The kernel distribution's own plugin: its checkpoint formats (safetensors, legacy ``.bin``), the core CLI
commands and the "which distribution provides X" data. Registered like any plugin (entry point ``core``), so
another plugin can add formats beside these or override them by name and priority."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from microformers.plugins import hookimpl

MICROFORMERS_API_VERSION = 1

# Which distribution provides what, so that a missing name's error can say what to install (data, in
# providers.json). Any plugin may declare MICROFORMERS_PROVIDES for names it knows others provide.
MICROFORMERS_PROVIDES: dict[str, dict[str, list[str]]] = json.loads(
    (Path(__file__).parent / "providers.json").read_text(encoding="utf-8")
)


@hookimpl
def register_checkpoint_formats(register: Any) -> None:
    register("safetensors", "microformers.formats.safetensors_format:SAFETENSORS", priority=100)
    register("pytorch_bin", "microformers.formats.bin_format:PYTORCH_BIN", priority=-100)


@hookimpl
def register_cli_commands(register: Any) -> None:
    register("plugins", "microformers.builtin.commands:plugins_command", help="list installed plugins")
    register("env", "microformers.builtin.commands:env_command", help="show the environment")

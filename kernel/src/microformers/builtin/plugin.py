"""The kernel distribution's own plugin: safetensors and legacy .bin formats, core CLI commands."""

from __future__ import annotations

from typing import Any

from microformers.plugins import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_checkpoint_formats(register: Any) -> None:
    register("safetensors", "microformers.builtin.safetensors_format:SAFETENSORS", priority=100)
    register("pytorch_bin", "microformers.builtin.bin_format:PYTORCH_BIN", priority=-100)


@hookimpl
def register_cli_commands(register: Any) -> None:
    register("plugins", "microformers.builtin.commands:plugins_command", help="list installed plugins")
    register("env", "microformers.builtin.commands:env_command", help="show the environment")

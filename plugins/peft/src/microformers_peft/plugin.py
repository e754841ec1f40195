"""Entry point ``peft``: the LoRA adapter type and the ``LoraConfig`` / ``PeftConfig`` names.

Registered as ``"module:Name"`` strings, so discovery imports neither torch nor the adapter code.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_adapters(register: Any) -> None:
    register("LORA", "microformers_peft.lora:LoraAdapters")


@hookimpl
def register_exports(register: Any) -> None:
    register("LoraConfig", "microformers_peft.config:LoraConfig")
    register("PeftConfig", "microformers_peft.config:PeftConfig")

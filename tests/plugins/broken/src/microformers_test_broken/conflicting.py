"""Registers a name the toy plugin registers too."""

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_model_sources(register: Any) -> None:
    register("toy-shared-alias", lambda: ("toy-from-conflicting-plugin", {}))

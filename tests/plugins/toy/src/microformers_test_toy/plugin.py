from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_models(register: Any) -> None:
    register(
        "toy",
        "microformers_test_toy.modeling_toy:ToyConfig",
        {
            "AutoModel": "microformers_test_toy.modeling_toy:ToyModel",
            "AutoModelForCausalLM": "microformers_test_toy.modeling_toy:ToyForCausalLM",
        },
    )


@hookimpl
def register_model_sources(register: Any) -> None:
    register("toy-shared-alias", lambda: ("toy-from-toy-plugin", {}))


@hookimpl
def register_cli_commands(register: Any) -> None:
    register("toy-hello", "microformers_test_toy.modeling_toy:hello_command", help="say hello")

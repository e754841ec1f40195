"""Entry point ``sdk``: the attention implementations every model can choose from and the
``microformers new-plugin`` command. (Checkpoint formats, weight init, placement, embedding resize and
the atomic save are the kernel's own.)

Only ``"module:name"`` strings are registered, so discovery imports neither torch nor the SDK layers.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_attention_implementations(register: Any) -> None:
    register("sdpa", "microformers_sdk.attention:sdpa_attention")
    register("eager", "microformers_sdk.attention:eager_attention")


@hookimpl
def register_cli_commands(register: Any) -> None:
    register(
        "new-plugin",
        "microformers_sdk.scaffold:new_plugin_command",
        help="create a new model-plugin distribution (pyproject, model, conformance tests)",
    )


@hookimpl
def register_environment_reports(register: Any) -> None:
    register("native ops", "microformers_sdk.native:native_report")


@hookimpl
def register_exports(register: Any) -> None:
    # The cache classes users build by hand (``from transformers import DynamicCache`` in the reference).
    for name, module in (
        ("DynamicCache", "cache"),
        ("StaticCache", "cache"),
        ("EncoderDecoderCache", "seq2seq"),
        ("apply_chunking_to_forward", "pytorch_utils"),  # ``from transformers import apply_chunking_to_forward``
    ):
        register(name, f"microformers_sdk.{module}:{name}")

"""Entry point ``sdk``: the attention implementations every model can choose from, the checkpoint
formats (safetensors, legacy ``pytorch_model.bin``), the model helpers ``PreTrainedModel`` declares
(``register_implementations``) and the ``microformers new-plugin`` command.

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
def register_checkpoint_formats(register: Any) -> None:
    register("safetensors", "microformers_sdk.formats.safetensors_format:SAFETENSORS", priority=100)
    register("pytorch_bin", "microformers_sdk.formats.bin_format:PYTORCH_BIN", priority=-100)


@hookimpl
def register_implementations(register: Any) -> None:
    for name in ("resize_token_embeddings", "enable_input_require_grads", "disable_input_require_grads"):
        register(f"PreTrainedModel.{name}", f"microformers_sdk.model_helpers:{name}")
    register("PreTrainedModel.place_modules", "microformers_sdk.model_helpers:place_modules")
    register("PreTrainedModel._init_weights", "microformers_sdk.model_helpers:init_weights")
    register("hub.staged_folder", "microformers_sdk.staging:staged_folder")

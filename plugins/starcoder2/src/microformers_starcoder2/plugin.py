"""Entry point ``starcoder2``: registers the StarCoder2 config, model heads and GGUF mapping.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_starcoder2.modeling_starcoder2"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "starcoder2",
        "microformers_starcoder2.configuration_starcoder2:Starcoder2Config",
        {
            "AutoModel": f"{_MODELING}:Starcoder2Model",
            "AutoModelForCausalLM": f"{_MODELING}:Starcoder2ForCausalLM",
            "AutoModelForSequenceClassification": f"{_MODELING}:Starcoder2ForSequenceClassification",
        },
    )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("starcoder2", "microformers_starcoder2.gguf_mapping:STARCODER2")

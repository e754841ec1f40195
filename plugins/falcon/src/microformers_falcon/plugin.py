"""Entry point ``falcon``: registers the Falcon config, model heads and GGUF mapping.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_falcon.modeling_falcon"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "falcon",
        "microformers_falcon.configuration_falcon:FalconConfig",
        {
            "AutoModel": f"{_MODELING}:FalconModel",
            "AutoModelForCausalLM": f"{_MODELING}:FalconForCausalLM",
            "AutoModelForSequenceClassification": f"{_MODELING}:FalconForSequenceClassification",
        },
    )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("falcon", "microformers_falcon.gguf_mapping:FALCON")

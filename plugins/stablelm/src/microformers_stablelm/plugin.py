"""Entry point ``stablelm``: registers the StableLM config, model heads and GGUF mapping.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_stablelm.modeling_stablelm"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "stablelm",
        "microformers_stablelm.configuration_stablelm:StableLmConfig",
        {
            "AutoModel": f"{_MODELING}:StableLmModel",
            "AutoModelForCausalLM": f"{_MODELING}:StableLmForCausalLM",
            "AutoModelForSequenceClassification": f"{_MODELING}:StableLmForSequenceClassification",
        },
    )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("stablelm", "microformers_stablelm.gguf_mapping:STABLELM")

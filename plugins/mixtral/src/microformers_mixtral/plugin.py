"""Entry point ``mixtral``: registers the Mixtral config and model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the model.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_mixtral.modeling_mixtral"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "mixtral",
        "microformers_mixtral.configuration_mixtral:MixtralConfig",
        {
            "AutoModel": f"{_MODELING}:MixtralModel",
            "AutoModelForCausalLM": f"{_MODELING}:MixtralForCausalLM",
            "AutoModelForSequenceClassification": f"{_MODELING}:MixtralForSequenceClassification",
        },
    )

"""Entry point ``phi3``: registers the Phi-3 config and model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_phi3.modeling_phi3"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "phi3",
        "microformers_phi3.configuration_phi3:Phi3Config",
        {
            "AutoModel": f"{_MODELING}:Phi3Model",
            "AutoModelForCausalLM": f"{_MODELING}:Phi3ForCausalLM",
            "AutoModelForSequenceClassification": f"{_MODELING}:Phi3ForSequenceClassification",
            "AutoModelForTokenClassification": f"{_MODELING}:Phi3ForTokenClassification",
        },
    )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("phi3", "microformers_phi3.gguf_mapping:PHI3")

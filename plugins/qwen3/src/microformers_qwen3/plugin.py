"""Entry point ``qwen3``: registers the Qwen3 config and model heads as ``"module:Name"`` strings (no torch)."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_qwen3.modeling_qwen3"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "qwen3",
        "microformers_qwen3.configuration_qwen3:Qwen3Config",
        {
            "AutoModel": f"{_MODELING}:Qwen3Model",
            "AutoModelForCausalLM": f"{_MODELING}:Qwen3ForCausalLM",
            "AutoModelForSequenceClassification": f"{_MODELING}:Qwen3ForSequenceClassification",
        },
    )

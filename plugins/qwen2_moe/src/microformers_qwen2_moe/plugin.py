"""Entry point ``qwen2_moe``: registers the Qwen2-MoE config and model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the model.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_qwen2_moe.modeling_qwen2_moe"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "qwen2_moe",
        "microformers_qwen2_moe.configuration_qwen2_moe:Qwen2MoeConfig",
        {
            "AutoModel": f"{_MODELING}:Qwen2MoeModel",
            "AutoModelForCausalLM": f"{_MODELING}:Qwen2MoeForCausalLM",
            "AutoModelForSequenceClassification": f"{_MODELING}:Qwen2MoeForSequenceClassification",
        },
    )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("qwen2moe", "microformers_qwen2_moe.gguf_mapping:QWEN2MOE")

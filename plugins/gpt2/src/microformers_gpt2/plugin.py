"""Entry point ``gpt2``: registers the GPT-2 config and its model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_gpt2.modeling_gpt2"

HEADS: dict[str, str] = {
    "AutoModel": "GPT2Model",
    "AutoModelForCausalLM": "GPT2LMHeadModel",
    "AutoModelForSequenceClassification": "GPT2ForSequenceClassification",
}


@hookimpl
def register_models(register: Any) -> None:
    register(
        "gpt2",
        "microformers_gpt2.configuration_gpt2:GPT2Config",
        {auto: f"{_MODELING}:{name}" for auto, name in HEADS.items()},
    )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("gpt2", "microformers_gpt2.gguf_mapping:GPT2")

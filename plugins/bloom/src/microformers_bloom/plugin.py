"""Entry point ``bloom``: registers the Bloom config, model heads and GGUF mapping.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_bloom.modeling_bloom"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "bloom",
        "microformers_bloom.configuration_bloom:BloomConfig",
        {
            "AutoModel": f"{_MODELING}:BloomModel",
            "AutoModelForCausalLM": f"{_MODELING}:BloomForCausalLM",
            "AutoModelForSequenceClassification": f"{_MODELING}:BloomForSequenceClassification",
        },
    )


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("bloom", "microformers_bloom.gguf_mapping:BLOOM")

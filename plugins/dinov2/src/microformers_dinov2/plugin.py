"""Entry point ``dinov2``: registers the DINOv2 config and its model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_dinov2.modeling_dinov2"

HEADS: dict[str, str] = {
    "AutoModel": "Dinov2Model",
    "AutoModelForImageClassification": "Dinov2ForImageClassification",
}


@hookimpl
def register_models(register: Any) -> None:
    register(
        "dinov2",
        "microformers_dinov2.configuration_dinov2:Dinov2Config",
        {auto: f"{_MODELING}:{name}" for auto, name in HEADS.items()},
    )

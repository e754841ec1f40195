"""Entry point ``vit``: registers the ViT and DeiT configs and their model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_vit.modeling_vit"

HEADS: dict[str, str] = {
    "AutoModel": "ViTModel",
    "AutoModelForImageClassification": "ViTForImageClassification",
}


# The released distilled DeiT checkpoints are ...WithTeacher models; DeiTForImageClassification is importable.
DEIT_HEADS: dict[str, str] = {
    "AutoModel": "DeiTModel",
    "AutoModelForImageClassification": "DeiTForImageClassificationWithTeacher",
}


@hookimpl
def register_models(register: Any) -> None:
    register(
        "vit",
        "microformers_vit.configuration_vit:ViTConfig",
        {auto: f"{_MODELING}:{name}" for auto, name in HEADS.items()},
    )
    register(
        "deit",
        "microformers_vit.configuration_deit:DeiTConfig",
        {auto: f"microformers_vit.modeling_deit:{name}" for auto, name in DEIT_HEADS.items()},
    )

"""Entry point ``marian``: registers MarianMT (``model_type: marian``), its config and heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_marian.modeling_marian"


@hookimpl
def register_models(register: Any) -> None:
    register(
        "marian",
        "microformers_marian.configuration_marian:MarianConfig",
        {"AutoModel": f"{_MODELING}:MarianModel", "AutoModelForSeq2SeqLM": f"{_MODELING}:MarianMTModel"},
    )

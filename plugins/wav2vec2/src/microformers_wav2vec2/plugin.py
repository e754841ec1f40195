"""Entry point ``wav2vec2``: registers the Wav2Vec2 config and its model heads.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_MODELING = "microformers_wav2vec2.modeling_wav2vec2"

HEADS: dict[str, str] = {
    "AutoModel": "Wav2Vec2Model",
    "AutoModelForCTC": "Wav2Vec2ForCTC",
    "AutoModelForAudioClassification": "Wav2Vec2ForSequenceClassification",
}


@hookimpl
def register_models(register: Any) -> None:
    register(
        "wav2vec2",
        "microformers_wav2vec2.configuration_wav2vec2:Wav2Vec2Config",
        {auto: f"{_MODELING}:{name}" for auto, name in HEADS.items()},
    )


@hookimpl
def register_exports(register: Any) -> None:
    register("Wav2Vec2Config", "microformers_wav2vec2.configuration_wav2vec2:Wav2Vec2Config")
    for name in set(HEADS.values()):
        register(name, f"{_MODELING}:{name}")

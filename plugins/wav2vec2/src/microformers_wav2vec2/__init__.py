"""microformers-wav2vec2: Wav2Vec2 (``model_type: wav2vec2``) speech encoders and their heads.

Importing the package is cheap; the model classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Wav2Vec2Config": "configuration_wav2vec2",
    **{
        name: "modeling_wav2vec2"
        for name in (
            "Wav2Vec2PreTrainedModel",
            "Wav2Vec2Model",
            "Wav2Vec2ForCTC",
            "Wav2Vec2ForSequenceClassification",
            "Wav2Vec2BaseModelOutput",
            "Wav2Vec2InputError",
        )
    },
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

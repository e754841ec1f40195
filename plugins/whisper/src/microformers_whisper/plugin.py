"""Entry point ``whisper``: the Whisper config and heads, its feature extractor, processor and tokenizers.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the models.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_P = "microformers_whisper"

HEADS: dict[str, str] = {
    "AutoModel": f"{_P}.modeling_whisper:WhisperModel",
    "AutoModelForSeq2SeqLM": f"{_P}.modeling_whisper:WhisperForConditionalGeneration",
    "AutoModelForSpeechSeq2Seq": f"{_P}.modeling_whisper:WhisperForConditionalGeneration",
    "AutoModelForAudioClassification": f"{_P}.modeling_whisper:WhisperForAudioClassification",
}

# name -> (module:class, role, model types it is the default for)
PROCESSORS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "WhisperFeatureExtractor": (
        f"{_P}.feature_extraction_whisper:WhisperFeatureExtractor",
        "feature_extractor",
        ("whisper",),
    ),
    "WhisperProcessor": (f"{_P}.processing_whisper:WhisperProcessor", "processor", ("whisper",)),
}

EXPORTS: dict[str, str] = {
    "WhisperConfig": f"{_P}.configuration_whisper:WhisperConfig",
    "WhisperModel": f"{_P}.modeling_whisper:WhisperModel",
    "WhisperForConditionalGeneration": f"{_P}.modeling_whisper:WhisperForConditionalGeneration",
    "WhisperForAudioClassification": f"{_P}.modeling_whisper:WhisperForAudioClassification",
    "WhisperFeatureExtractor": f"{_P}.feature_extraction_whisper:WhisperFeatureExtractor",
    "WhisperProcessor": f"{_P}.processing_whisper:WhisperProcessor",
    "WhisperTokenizer": f"{_P}.tokenization_whisper:WhisperTokenizer",
    "WhisperTokenizerFast": f"{_P}.tokenization_whisper:WhisperTokenizerFast",
}


@hookimpl
def register_models(register: Any) -> None:
    register("whisper", f"{_P}.configuration_whisper:WhisperConfig", HEADS)


@hookimpl
def register_processors(register: Any) -> None:
    for name, (ref, role, model_types) in PROCESSORS.items():
        register(name, ref, role=role, model_types=model_types)


@hookimpl
def register_tokenizers(register: Any) -> None:
    register(
        "whisper",
        f"{_P}.tokenization_whisper:WhisperTokenizerFast",
        tokenizer_classes=("WhisperTokenizer", "WhisperTokenizerFast"),
        priority=-10,
    )


@hookimpl
def register_exports(register: Any) -> None:
    for name, ref in EXPORTS.items():
        register(name, ref)

"""Entry point ``audio``: processors, the CTC tokenizer backend, the audio pipelines and public names.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor numpy.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_P = "microformers_audio"

# name -> (module:class, role, model types it is the default for)
PROCESSORS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "Wav2Vec2FeatureExtractor": (
        f"{_P}.feature_extraction_wav2vec2:Wav2Vec2FeatureExtractor",
        "feature_extractor",
        ("wav2vec2",),
    ),
    "Wav2Vec2Processor": (f"{_P}.processing_wav2vec2:Wav2Vec2Processor", "processor", ("wav2vec2",)),
}

EXPORTS: dict[str, str] = {
    "Wav2Vec2FeatureExtractor": f"{_P}.feature_extraction_wav2vec2:Wav2Vec2FeatureExtractor",
    "Wav2Vec2CTCTokenizer": f"{_P}.tokenization_wav2vec2:Wav2Vec2CTCTokenizer",
    "Wav2Vec2Processor": f"{_P}.processing_wav2vec2:Wav2Vec2Processor",
    "DataCollatorCTCWithPadding": f"{_P}.data_collator:DataCollatorCTCWithPadding",
    "AutomaticSpeechRecognitionPipeline": f"{_P}.pipelines:AutomaticSpeechRecognitionPipeline",
    "AudioClassificationPipeline": f"{_P}.pipelines:AudioClassificationPipeline",
    "BatchFeature": "microformers_sdk.processing:BatchFeature",
    "SequenceFeatureExtractor": "microformers_sdk.processing:SequenceFeatureExtractor",
    "FeatureExtractionMixin": "microformers_sdk.processing:FeatureExtractionMixin",
    "ProcessorMixin": "microformers_sdk.processing:ProcessorMixin",
}


@hookimpl
def register_processors(register: Any) -> None:
    for name, (ref, role, model_types) in PROCESSORS.items():
        register(name, ref, role=role, model_types=model_types)


@hookimpl
def register_tokenizers(register: Any) -> None:
    register(
        "wav2vec2_ctc",
        f"{_P}.tokenization_wav2vec2:Wav2Vec2CTCTokenizer",
        tokenizer_classes=("Wav2Vec2CTCTokenizer",),
        priority=-10,
    )


@hookimpl
def register_pipelines(register: Any) -> None:
    register(
        "automatic-speech-recognition",
        f"{_P}.pipelines:AutomaticSpeechRecognitionPipeline",
        model_class=("AutoModelForCTC", "AutoModelForSpeechSeq2Seq"),
    )
    register(
        "audio-classification",
        f"{_P}.pipelines:AudioClassificationPipeline",
        model_class=("AutoModelForAudioClassification",),
    )


@hookimpl
def register_exports(register: Any) -> None:
    for name, ref in EXPORTS.items():
        register(name, ref)

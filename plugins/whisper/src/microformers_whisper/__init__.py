"""microformers-whisper: Whisper speech recognition (model, feature extractor, tokenizer, processor, generate).

Importing the package is cheap; classes load (with torch/numpy/tokenizers) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "WhisperConfig": "configuration_whisper",
    "WhisperPreTrainedModel": "modeling_whisper",
    "WhisperEncoder": "modeling_whisper",
    "WhisperDecoder": "modeling_whisper",
    "WhisperModel": "modeling_whisper",
    "WhisperForConditionalGeneration": "modeling_whisper",
    "WhisperForAudioClassification": "modeling_whisper",
    "WhisperInputError": "modeling_whisper",
    "WhisperFeatureExtractor": "feature_extraction_whisper",
    "WhisperProcessor": "processing_whisper",
    "WhisperTokenizer": "tokenization_whisper",
    "WhisperTokenizerFast": "tokenization_whisper",
    # the decoder prompt and result of Whisper's generate, shared with ORTModelForSpeechSeq2Seq (microformers-onnx)
    "check_whisper_arguments": "generation_whisper",
    "detect_language": "generation_whisper",
    "generated_tokens_only": "generation_whisper",
    "whisper_decoder_prompt": "generation_whisper",
    "whisper_language_id": "generation_whisper",
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

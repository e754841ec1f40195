"""``WhisperProcessor``: the Whisper feature extractor and tokenizer as one object."""

from __future__ import annotations

from typing import Any, ClassVar

from microformers_sdk.processing import ProcessorMixin

from .feature_extraction_whisper import WhisperFeatureExtractor
from .tokenization_whisper import WhisperTokenizerFast

__all__ = ["WhisperProcessor"]


class WhisperProcessor(ProcessorMixin):
    """``processor(audio=waveform, sampling_rate=16000)`` -> ``input_features``; ``processor(text=...)`` -> ids;
    both -> ``input_features`` plus ``labels``; ``processor.batch_decode(ids)`` -> text."""

    feature_extractor_class: ClassVar[type] = WhisperFeatureExtractor
    tokenizer_class: ClassVar[type] = WhisperTokenizerFast

    def get_decoder_prompt_ids(
        self, task: str | None = None, language: str | None = None, no_timestamps: bool = True
    ) -> list[tuple[int, int]]:
        return self.tokenizer.get_decoder_prompt_ids(task=task, language=language, no_timestamps=no_timestamps)

    def get_prompt_ids(self, text: str, return_tensors: str | None = "np") -> Any:
        return self.tokenizer.get_prompt_ids(text, return_tensors=return_tensors)

"""``Wav2Vec2Processor``: the Wav2Vec2 feature extractor and CTC tokenizer as one object."""

from __future__ import annotations

from typing import ClassVar

from microformers_sdk.processing import ProcessorMixin

from .feature_extraction_wav2vec2 import Wav2Vec2FeatureExtractor
from .tokenization_wav2vec2 import Wav2Vec2CTCTokenizer

__all__ = ["Wav2Vec2Processor"]


class Wav2Vec2Processor(ProcessorMixin):
    """``processor(audio=waveform, sampling_rate=16000)`` -> ``input_values``; ``processor(text=...)`` -> ids;
    both at once -> ``input_values`` plus ``labels``; ``processor.batch_decode(argmax_ids)`` -> text."""

    feature_extractor_class: ClassVar[type] = Wav2Vec2FeatureExtractor
    tokenizer_class: ClassVar[type] = Wav2Vec2CTCTokenizer

"""microformers-audio: audio preprocessing, the Wav2Vec2 processor family and the audio pipelines.

Importing the package is cheap; classes load (with numpy/torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Wav2Vec2FeatureExtractor": "feature_extraction_wav2vec2",
    "Wav2Vec2CTCTokenizer": "tokenization_wav2vec2",
    "Wav2Vec2CTCTokenizerOutput": "tokenization_wav2vec2",
    "Wav2Vec2Processor": "processing_wav2vec2",
    "DataCollatorCTCWithPadding": "data_collator",
    "AutomaticSpeechRecognitionPipeline": "pipelines",
    "AudioClassificationPipeline": "pipelines",
    "AudioInputError": "audio_io",
    "MAX_SAMPLES": "audio_io",
    "MAX_SAMPLING_RATE": "audio_io",
    "check_int_setting": "audio_io",
    "check_sampling_rate": "audio_io",
    "check_sampling_rate_setting": "audio_io",
    "load_audio": "audio_io",
    "resample": "audio_io",
    "to_mono": "audio_io",
    **{
        name: "audio_utils"
        for name in (
            "amplitude_to_db",
            "hertz_to_mel",
            "mel_filter_bank",
            "mel_to_hertz",
            "optimal_fft_length",
            "power_to_db",
            "spectrogram",
            "window_function",
        )
    },
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

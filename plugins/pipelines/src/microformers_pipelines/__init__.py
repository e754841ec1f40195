"""microformers-pipelines: the pipeline base classes and the built-in tasks (``register_pipelines`` hook).

Importing the package is cheap; the classes load (with torch) on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

TASKS: tuple[str, ...] = (
    "text-generation",
    "fill-mask",
    "text-classification",
    "token-classification",
    "question-answering",
    "feature-extraction",
    "zero-shot-classification",
    "text2text-generation",
    "summarization",
    "translation",
)

_LAZY: dict[str, str] = {
    "Pipeline": "base",
    "ChunkPipeline": "base",
    "resolve_device": "base",
    "check_batch_size": "base",
    "FillMaskPipeline": "fill_mask",
    "FeatureExtractionPipeline": "feature_extraction",
    "QuestionAnsweringPipeline": "question_answering",
    "TextClassificationPipeline": "text_classification",
    "TextGenerationPipeline": "text_generation",
    "TokenClassificationPipeline": "token_classification",
    "ZeroShotClassificationPipeline": "zero_shot",
    "Text2TextGenerationPipeline": "text2text_generation",
    "SummarizationPipeline": "text2text_generation",
    "TranslationPipeline": "text2text_generation",
}

__all__ = ["TASKS", *_LAZY]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

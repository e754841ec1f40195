"""Entry point ``pipelines``: tasks, the all-MiniLM-L6-v2 model alias and the ``run`` command.

Everything is registered as ``"module:Name"`` strings, so discovery imports neither torch nor the tasks.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_PACKAGE = "microformers_pipelines"

# task -> (module:class, Auto head(s), default model alias, aliases)
TASK_TABLE: dict[str, tuple[str, tuple[str, ...], str | None, tuple[str, ...]]] = {
    "text-generation": (
        "text_generation:TextGenerationPipeline",
        ("AutoModelForCausalLM",),
        "smollm2-135m-instruct",
        (),
    ),
    "fill-mask": ("fill_mask:FillMaskPipeline", ("AutoModelForMaskedLM",), None, ()),
    "text-classification": (
        "text_classification:TextClassificationPipeline",
        ("AutoModelForSequenceClassification",),
        None,
        ("sentiment-analysis",),
    ),
    "token-classification": (
        "token_classification:TokenClassificationPipeline",
        ("AutoModelForTokenClassification",),
        None,
        ("ner",),
    ),
    "question-answering": (
        "question_answering:QuestionAnsweringPipeline",
        ("AutoModelForQuestionAnswering",),
        None,
        (),
    ),
    "feature-extraction": ("feature_extraction:FeatureExtractionPipeline", ("AutoModel",), "all-minilm-l6-v2", ()),
    "sentence-similarity": (
        "sentence_similarity:SentenceSimilarityPipeline",
        ("AutoModel",),
        "all-minilm-l6-v2",
        (),
    ),
    "zero-shot-classification": (
        "zero_shot:ZeroShotClassificationPipeline",
        ("AutoModelForSequenceClassification",),
        None,
        (),
    ),
    # encoder-decoder tasks (the reference 4.x output shapes; 5.x removed them)
    "text2text-generation": (
        "text2text_generation:Text2TextGenerationPipeline",
        ("AutoModelForSeq2SeqLM",),
        None,
        (),
    ),
    "summarization": ("text2text_generation:SummarizationPipeline", ("AutoModelForSeq2SeqLM",), None, ()),
    "translation": ("text2text_generation:TranslationPipeline", ("AutoModelForSeq2SeqLM",), None, ()),
}


# The reference's default checkpoint for the tasks without a packaged one: named in the error that asks for a model
# (the encoder-decoder tasks: its 4.x defaults, as 5.x dropped those tasks).
REFERENCE_DEFAULTS: dict[str, str] = {
    "fill-mask": "distilbert/distilroberta-base",
    "text-classification": "distilbert/distilbert-base-uncased-finetuned-sst-2-english",
    "token-classification": "dbmdz/bert-large-cased-finetuned-conll03-english",
    "question-answering": "distilbert/distilbert-base-cased-distilled-squad",
    "zero-shot-classification": "facebook/bart-large-mnli",
    "text2text-generation": "google-t5/t5-base",
    "summarization": "sshleifer/distilbart-cnn-12-6",
    "translation": "google-t5/t5-base",
}


# ``translation_en_to_de``, ``translation_en_XX_to_ro_RO``: the translation task, built with the pair in its name
TRANSLATION_TASK_PATTERN = r"translation_(?P<src>[^_]+(?:_[A-Z]{2})?)_to_(?P<tgt>[^_]+(?:_[A-Z]{2})?)"


@hookimpl
def register_pipelines(register: Any) -> None:
    for task, (ref, heads, default, aliases) in TASK_TABLE.items():
        patterns = (TRANSLATION_TASK_PATTERN,) if task == "translation" else ()
        register(
            task,
            f"{_PACKAGE}.{ref}",
            model_class=heads,
            default_model=default,
            reference_default_model=REFERENCE_DEFAULTS.get(task),
            aliases=aliases,
            task_patterns=patterns,
        )


@hookimpl
def register_model_sources(register: Any) -> None:
    register("all-minilm-l6-v2", f"{_PACKAGE}.sources:all_minilm_l6_v2")


@hookimpl
def register_cli_commands(register: Any) -> None:
    register("run", f"{_PACKAGE}.cli:run_command", help="run a pipeline task on arguments or stdin lines (JSON lines)")


@hookimpl
def register_exports(register: Any) -> None:
    """``microformers.Pipeline`` / ``microformers.ChunkPipeline``: the base classes every task builds on."""
    for name in ("Pipeline", "ChunkPipeline", "KeyDataset", "KeyPairDataset"):
        register(name, f"{_PACKAGE}.base:{name}")

"""``XLMRobertaConfig``: ``model_type: xlm-roberta`` checkpoints (RoBERTa's design, a multilingual vocabulary).

Imports no torch. The fields and their checks are RoBERTa's; only the model type and the default
vocabulary size (the reference's) differ.
"""

from __future__ import annotations

from typing import Any

from .configuration_roberta import RobertaConfig


class XLMRobertaConfig(RobertaConfig):
    """RoBERTa trained on 100 languages with a SentencePiece (Unigram) vocabulary."""

    model_type = "xlm-roberta"

    def __init__(self, vocab_size: int = 30522, **kwargs: Any) -> None:
        super().__init__(vocab_size=vocab_size, **kwargs)

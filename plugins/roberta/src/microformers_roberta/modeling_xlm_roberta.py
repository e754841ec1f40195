"""XLM-RoBERTa: the RoBERTa encoder and heads unchanged, under ``XLMRobertaConfig``.

Checkpoints use RoBERTa's tensor names (``roberta.encoder.layer.{i}...``, ``lm_head...``, ``classifier...``).
"""

from __future__ import annotations

from typing import ClassVar

from .configuration_xlm_roberta import XLMRobertaConfig
from .modeling_roberta import (
    RobertaForCausalLM,
    RobertaForMaskedLM,
    RobertaForMultipleChoice,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaModel,
)

__all__ = [
    "XLMRobertaConfig",
    "XLMRobertaForCausalLM",
    "XLMRobertaForMaskedLM",
    "XLMRobertaForMultipleChoice",
    "XLMRobertaForQuestionAnswering",
    "XLMRobertaForSequenceClassification",
    "XLMRobertaForTokenClassification",
    "XLMRobertaModel",
]


class XLMRobertaModel(RobertaModel):
    config_class = XLMRobertaConfig


class XLMRobertaForMaskedLM(RobertaForMaskedLM):
    config_class = XLMRobertaConfig
    base_model_class: ClassVar[type[RobertaModel]] = XLMRobertaModel


class XLMRobertaForSequenceClassification(RobertaForSequenceClassification):
    config_class = XLMRobertaConfig
    base_model_class: ClassVar[type[RobertaModel]] = XLMRobertaModel


class XLMRobertaForTokenClassification(RobertaForTokenClassification):
    config_class = XLMRobertaConfig
    base_model_class: ClassVar[type[RobertaModel]] = XLMRobertaModel


class XLMRobertaForQuestionAnswering(RobertaForQuestionAnswering):
    config_class = XLMRobertaConfig
    base_model_class: ClassVar[type[RobertaModel]] = XLMRobertaModel


class XLMRobertaForMultipleChoice(RobertaForMultipleChoice):
    config_class = XLMRobertaConfig
    base_model_class: ClassVar[type[RobertaModel]] = XLMRobertaModel


class XLMRobertaForCausalLM(RobertaForCausalLM):
    config_class = XLMRobertaConfig
    base_model_class: ClassVar[type[RobertaModel]] = XLMRobertaModel

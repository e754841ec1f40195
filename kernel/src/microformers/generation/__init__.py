"""Generation: ``GenerationConfig``, processor / criteria base classes, streamers and ``generate()``.

The kernel part is generic: it prepares inputs and settings and picks a decoding strategy from the
registry (hook ``register_generation_strategies``). The strategies themselves (greedy, sampling,
beam search) and the concrete processors and criteria come from the ``microformers-generation``
plugin or any other plugin.
"""

from __future__ import annotations

from .configuration import DEFAULTS, GENERATION_CONFIG_NAME, GenerationConfig
from .decoding import IncrementalDecoder
from .logits_process import LogitsProcessor, LogitsProcessorList
from .mixin import STANDARD_STRATEGIES, GenerationMixin, merge_with_defaults, select_strategy
from .outputs import (
    GenerateBeamDecoderOnlyOutput,
    GenerateBeamOutput,
    GenerateDecoderOnlyOutput,
    GenerateNonBeamOutput,
    GenerateOutput,
)
from .stopping_criteria import StoppingCriteria, StoppingCriteriaList
from .streamers import BaseStreamer, TextIteratorStreamer, TextStreamer

__all__ = [
    "DEFAULTS",
    "GENERATION_CONFIG_NAME",
    "STANDARD_STRATEGIES",
    "BaseStreamer",
    "GenerateBeamDecoderOnlyOutput",
    "GenerateBeamOutput",
    "GenerateDecoderOnlyOutput",
    "GenerateNonBeamOutput",
    "GenerateOutput",
    "GenerationConfig",
    "GenerationMixin",
    "IncrementalDecoder",
    "LogitsProcessor",
    "LogitsProcessorList",
    "StoppingCriteria",
    "StoppingCriteriaList",
    "TextIteratorStreamer",
    "TextStreamer",
    "merge_with_defaults",
    "select_strategy",
]

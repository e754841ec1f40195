"""Generation: ``GenerationConfig`` and ``generate()``, which selects a strategy and calls it.

The strategies (greedy, sampling, beam search ...), input preparation, processors, criteria and
streamers come from the ``microformers-generation`` plugin or any other plugin (hook
``register_generation_strategies``).
"""

from __future__ import annotations

from .configuration import DEFAULTS, GENERATION_CONFIG_NAME, GenerationConfig
from .mixin import GenerationMixin, select_strategy

__all__ = ["DEFAULTS", "GENERATION_CONFIG_NAME", "GenerationConfig", "GenerationMixin", "select_strategy"]

"""Generation: ``GenerationConfig`` and ``generate()``, which selects a strategy and calls it.

The strategies (greedy, sampling, beam search ...), input preparation, processors, criteria and
streamers come from the ``microformers-generation`` plugin or any other plugin (hook
``register_generation_strategies``; checks of their settings: ``register_generation_config_checks``).
``compute_transition_scores`` is the kernel's own.
"""

from __future__ import annotations

from .configuration import DEFAULTS, GENERATION_CONFIG_NAME, GenerationConfig
from .mixin import GenerationMixin, select_strategy
from .scores import compute_transition_scores

__all__ = ["DEFAULTS", "GENERATION_CONFIG_NAME", "GenerationConfig", "GenerationMixin", "compute_transition_scores", "select_strategy"]

"""Generation: GenerationConfig, processors/criteria base classes, streamers and ``generate()``."""

from __future__ import annotations


class GenerationMixin:
    """Adds ``generate()`` to models (filled in by the generation work)."""

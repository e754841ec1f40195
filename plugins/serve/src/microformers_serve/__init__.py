"""An OpenAI-compatible server with continuous batching (``microformers serve``).

Importing the package is cheap; the engine and the app load on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

_LAZY: dict[str, str] = {
    "Engine": "engine",
    "Event": "engine",
    "GenerationRequest": "engine",
    "QueueFullError": "engine",
    "RaggedCache": "engine",
    "ShuttingDownError": "engine",
    "create_app": "app",
    "serve_command": "commands",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""Terminal chat and one-shot generation on top of the microformers kernel.

Importing the package is cheap; the commands load on first access.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

_LAZY: dict[str, str] = {name: "commands" for name in ("Session", "chat_command", "generate_command", "run_chat")}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

"""Entry point ``sdk``: registers the attention implementations every model can choose from.

Only ``"module:name"`` strings are registered, so discovery imports neither torch nor the SDK layers.
"""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_attention_implementations(register: Any) -> None:
    register("sdpa", "microformers_sdk.attention:sdpa_attention")
    register("eager", "microformers_sdk.attention:eager_attention")

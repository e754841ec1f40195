"""``MistralConfig``: Llama's layout plus sliding-window attention (``sliding_window`` tokens, every layer)."""

from __future__ import annotations

from typing import Any

from microformers.errors import ConfigError

from .configuration_llama import LlamaConfig


class MistralConfig(LlamaConfig):
    """``model_type: mistral``; ``sliding_window: null`` means full attention."""

    model_type = "mistral"

    def __init__(
        self,
        vocab_size: int = 32000,
        hidden_size: int = 4096,
        intermediate_size: int = 14336,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 8,
        max_position_embeddings: int = 4096 * 32,
        sliding_window: int | None = 4096,
        **kwargs: Any,
    ) -> None:
        if sliding_window is not None and (not isinstance(sliding_window, int) or sliding_window <= 0):
            raise ConfigError(f"sliding_window={sliding_window!r} must be a positive integer or null; fix config.json")
        self.sliding_window = sliding_window
        super().__init__(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            max_position_embeddings=max_position_embeddings,
            **kwargs,
        )

    def layer_sliding_window(self, layer_idx: int) -> int | None:
        return self.sliding_window

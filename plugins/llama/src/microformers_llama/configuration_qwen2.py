"""``Qwen2Config``: Llama's layout with biased q/k/v projections and optional per-layer sliding windows."""

from __future__ import annotations

from typing import Any

from microformers.errors import ConfigError

from .configuration_llama import LlamaConfig

_LAYER_TYPES = ("full_attention", "sliding_attention")


class Qwen2Config(LlamaConfig):
    """``model_type: qwen2``.

    With ``use_sliding_window``, layers from ``max_window_layers`` on attend within ``sliding_window``
    tokens (or the layers ``layer_types`` marks ``"sliding_attention"``); without it ``sliding_window``
    is stored as null, as the reference does.
    """

    model_type = "qwen2"

    def __init__(
        self,
        vocab_size: int = 151936,
        hidden_size: int = 4096,
        intermediate_size: int = 22016,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 32,
        max_position_embeddings: int = 32768,
        use_sliding_window: bool = False,
        sliding_window: int | None = 4096,
        max_window_layers: int = 28,
        layer_types: list[str] | None = None,
        bos_token_id: int | None = None,
        eos_token_id: int | list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        self.use_sliding_window = use_sliding_window
        self.sliding_window = sliding_window if use_sliding_window else None
        if self.sliding_window is not None and (not isinstance(self.sliding_window, int) or self.sliding_window <= 0):
            raise ConfigError(f"sliding_window={sliding_window!r} must be a positive integer or null; fix config.json")
        self.max_window_layers = max_window_layers
        if layer_types is None:
            layer_types = [
                "sliding_attention" if self.sliding_window is not None and i >= max_window_layers else "full_attention"
                for i in range(num_hidden_layers)
            ]
        bad = [t for t in layer_types if t not in _LAYER_TYPES]
        if bad or len(layer_types) != num_hidden_layers:
            raise ConfigError(
                f"layer_types must list {num_hidden_layers} entries (num_hidden_layers), each one of "
                f"{list(_LAYER_TYPES)}; got {layer_types!r}. Fix config.json"
            )
        self.layer_types = list(layer_types)
        super().__init__(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            max_position_embeddings=max_position_embeddings,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            **kwargs,
        )

    def layer_sliding_window(self, layer_idx: int) -> int | None:
        return self.sliding_window if self.layer_types[layer_idx] == "sliding_attention" else None

    def layer_attention_bias(self) -> tuple[bool, bool]:
        return True, False

"""``Qwen3Config``: the ``config.json`` of ``model_type: qwen3`` checkpoints (Qwen3 0.6B-32B, dense).

The layout is Qwen2's (optional per-layer sliding windows through ``use_sliding_window``,
``max_window_layers`` or ``layer_types``) with an explicit ``head_dim`` (128 by default, not
``hidden_size / num_attention_heads``) and one ``attention_bias`` switch for all four projections.
Imports no torch, so ``AutoConfig`` stays cheap. Head counts, sizes and layer types are checked
when the config is built, so a bad file is refused naming the field (and, through ``from_pretrained``,
the file).
"""

from __future__ import annotations

from typing import Any

from microformers_llama.configuration_llama import LlamaConfig
from microformers_llama.configuration_qwen2 import Qwen2Config


class Qwen3Config(Qwen2Config):
    """``model_type: qwen3``: a Qwen2-shaped decoder whose attention normalises each query and key head."""

    model_type = "qwen3"

    def __init__(
        self,
        vocab_size: int = 151936,
        hidden_size: int = 4096,
        intermediate_size: int = 22016,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 32,
        head_dim: int | None = 128,
        max_position_embeddings: int = 32768,
        attention_bias: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            head_dim=head_dim,
            max_position_embeddings=max_position_embeddings,
            attention_bias=attention_bias,
            **kwargs,
        )

    def layer_attention_bias(self) -> tuple[bool, bool]:
        return LlamaConfig.layer_attention_bias(self)

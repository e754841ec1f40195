"""``ViTConfig``: the ``config.json`` of ``model_type: vit`` checkpoints. Imports no torch."""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_heads_divide, check_positive_ints


def as_pair(value: Any, setting: str) -> tuple[int, int]:
    """``image_size`` / ``patch_size`` as ``(height, width)``: an int means a square."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ConfigError(f"{setting}={value!r} must be a positive int or a [height, width] pair of them")
    return pair  # type: ignore[return-value]


class ViTConfig(PretrainedConfig):
    """Pre-norm transformer encoder over image patches, with a [CLS] token and learned positions."""

    model_type = "vit"

    def __init__(
        self,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.0,
        attention_probs_dropout_prob: float = 0.0,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-12,
        image_size: int | list[int] | tuple[int, int] = 224,
        patch_size: int | list[int] | tuple[int, int] = 16,
        num_channels: int = 3,
        qkv_bias: bool = True,
        encoder_stride: int = 16,
        pooler_output_size: int | None = None,
        pooler_act: str = "tanh",
        **kwargs: Any,
    ) -> None:
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.image_size = image_size
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.qkv_bias = qkv_bias
        self.encoder_stride = encoder_stride
        self.pooler_output_size = pooler_output_size or hidden_size
        self.pooler_act = pooler_act
        check_positive_ints(
            self, ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "num_channels")
        )
        check_heads_divide(self)
        as_pair(image_size, "image_size")
        as_pair(patch_size, "patch_size")
        super().__init__(**kwargs)

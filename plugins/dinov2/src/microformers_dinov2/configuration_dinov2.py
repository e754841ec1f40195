"""``Dinov2Config``: the ``config.json`` of ``model_type: dinov2`` checkpoints. Imports no torch.

The backbone settings the reference writes (``out_features``, ``out_indices``, ``stage_names``, ``apply_layernorm``,
``reshape_hidden_states``) are kept and written back; this plugin has no ``Dinov2Backbone``.
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_heads_divide, check_positive_ints


class Dinov2Config(PretrainedConfig):
    """ViT-style pre-norm encoder with layer scale, optional SwiGLU MLP and always-interpolated positions."""

    model_type = "dinov2"

    def __init__(
        self,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        mlp_ratio: float = 4,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.0,
        attention_probs_dropout_prob: float = 0.0,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-6,
        image_size: int | list[int] | tuple[int, int] = 224,
        patch_size: int | list[int] | tuple[int, int] = 14,
        num_channels: int = 3,
        qkv_bias: bool = True,
        layerscale_value: float = 1.0,
        drop_path_rate: float = 0.0,
        use_swiglu_ffn: bool = False,
        use_mask_token: bool = True,
        **kwargs: Any,
    ) -> None:
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.mlp_ratio = mlp_ratio
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.image_size = image_size
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.qkv_bias = qkv_bias
        self.layerscale_value = layerscale_value
        self.drop_path_rate = drop_path_rate
        self.use_swiglu_ffn = use_swiglu_ffn
        self.use_mask_token = use_mask_token
        check_positive_ints(self, ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_channels"))
        check_heads_divide(self)
        if not isinstance(mlp_ratio, (int, float)) or isinstance(mlp_ratio, bool) or mlp_ratio <= 0:
            raise ConfigError(f"mlp_ratio={mlp_ratio!r} in Dinov2Config must be a positive number; fix config.json")
        if not 0.0 <= float(drop_path_rate) < 1.0:
            raise ConfigError(f"drop_path_rate={drop_path_rate!r} in Dinov2Config must be in [0, 1)")
        super().__init__(**kwargs)

"""``SiglipTextConfig``, ``SiglipVisionConfig`` and ``SiglipConfig``: CLIP's layout with SigLIP's defaults (tanh
GELU, LayerNorm eps 1e-6, 64 text positions, 16-pixel patches, an attention-pooling head). Imports no torch."""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_positive_ints

from .configuration_clip import TowerConfig, _square_side, two_tower_configs

__all__ = ["SiglipConfig", "SiglipTextConfig", "SiglipVisionConfig"]


class SiglipTextConfig(TowerConfig):
    """SigLIP's text tower: a bidirectional pre-norm transformer pooled at the last position, then ``head``."""

    model_type = "siglip_text_model"
    composite_model_type = "siglip"
    composite_key = "text_config"

    def __init__(
        self,
        vocab_size: int = 32000,
        hidden_size: int = 768,
        intermediate_size: int = 3072,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        max_position_embeddings: int = 64,
        hidden_act: str = "gelu_pytorch_tanh",
        layer_norm_eps: float = 1e-6,
        attention_dropout: float = 0.0,
        pad_token_id: int | None = 1,
        bos_token_id: int | None = 49406,
        eos_token_id: int | None = 49407,
        projection_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.hidden_act = hidden_act
        self.layer_norm_eps = layer_norm_eps
        self.attention_dropout = attention_dropout
        self.projection_size = projection_size if projection_size is not None else hidden_size
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self._check_tower()
        check_positive_ints(self, ("vocab_size", "max_position_embeddings", "projection_size"))


class SiglipVisionConfig(TowerConfig):
    """SigLIP's vision tower: patches (no class token), encoder, ``post_layernorm``, attention-pooling ``head``."""

    model_type = "siglip_vision_model"
    composite_model_type = "siglip"
    composite_key = "vision_config"

    def __init__(
        self,
        hidden_size: int = 768,
        intermediate_size: int = 3072,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        num_channels: int = 3,
        image_size: int = 224,
        patch_size: int = 16,
        hidden_act: str = "gelu_pytorch_tanh",
        layer_norm_eps: float = 1e-6,
        attention_dropout: float = 0.0,
        vision_use_head: bool = True,
        **kwargs: Any,
    ) -> None:
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_channels = num_channels
        self.image_size = _square_side(image_size, "image_size")
        self.patch_size = _square_side(patch_size, "patch_size")
        self.hidden_act = hidden_act
        self.layer_norm_eps = layer_norm_eps
        self.attention_dropout = attention_dropout
        self.vision_use_head = bool(vision_use_head)
        super().__init__(**kwargs)
        self._check_tower()
        check_positive_ints(self, ("num_channels",))
        if self.patch_size > self.image_size:
            raise ConfigError(f"patch_size={self.patch_size} is larger than image_size={self.image_size}")


class SiglipConfig(PretrainedConfig):
    """``text_config`` + ``vision_config`` (nested); the towers' heads project, so there is no projection_dim."""

    model_type = "siglip"
    text_config_class: ClassVar[type[TowerConfig]] = SiglipTextConfig
    vision_config_class: ClassVar[type[TowerConfig]] = SiglipVisionConfig

    def __init__(
        self,
        text_config: dict[str, Any] | SiglipTextConfig | None = None,
        vision_config: dict[str, Any] | SiglipVisionConfig | None = None,
        initializer_factor: float = 1.0,
        **kwargs: Any,
    ) -> None:
        self.text_config, self.vision_config = two_tower_configs(
            self.text_config_class, self.vision_config_class, text_config, vision_config, kwargs
        )
        self.initializer_factor = initializer_factor
        super().__init__(**kwargs)
        if self.text_config.projection_size != self.vision_config.hidden_size:
            raise ConfigError(
                f"text_config.projection_size={self.text_config.projection_size} must equal "
                f"vision_config.hidden_size={self.vision_config.hidden_size}: SigLIP compares the text head's output "
                "with the image's pooled vector"
            )

    @classmethod
    def from_text_vision_configs(
        cls, text_config: SiglipTextConfig, vision_config: SiglipVisionConfig, **kwargs: Any
    ) -> SiglipConfig:
        return cls(text_config=text_config.to_dict(), vision_config=vision_config.to_dict(), **kwargs)

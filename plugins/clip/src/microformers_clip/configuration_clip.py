"""``CLIPTextConfig``, ``CLIPVisionConfig`` and ``CLIPConfig`` (the two towers plus the projection). Imports no torch.

A ``CLIPConfig`` file holds the towers' settings nested under ``text_config`` and ``vision_config``; the tower
configs read a composite folder too (``CLIPTextConfig.from_pretrained(clip_folder)`` takes its ``text_config``),
so ``CLIPTextModel.from_pretrained(clip_folder)`` works as in the reference implementation.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_heads_divide, check_positive_ints

__all__ = ["CLIPConfig", "CLIPTextConfig", "CLIPVisionConfig", "TowerConfig", "two_tower_configs"]

_TOWER_SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def _square_side(value: Any, setting: str) -> int:
    """``image_size`` / ``patch_size``: these models work on square images and patches, given as one int."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{setting}={value!r} must be a positive int (the side of a square)")
    return value


class TowerConfig(PretrainedConfig):
    """A text or vision tower's config; ``from_pretrained`` on a two-tower folder reads the nested section."""

    # The composite model_type whose config.json nests this tower, and the key it is nested under.
    composite_model_type: ClassVar[str] = ""
    composite_key: ClassVar[str] = ""

    @classmethod
    def get_config_dict(cls, pretrained: str | os.PathLike[str], **kwargs: Any) -> dict[str, Any]:
        config_dict = super().get_config_dict(pretrained, **kwargs)
        if config_dict.get("model_type") == cls.composite_model_type:
            nested = config_dict.get(cls.composite_key)
            if not isinstance(nested, dict):
                raise ConfigError(
                    f"{pretrained}/config.json is a '{cls.composite_model_type}' config without a "
                    f"'{cls.composite_key}' section; {cls.__name__} cannot be read from it"
                )
            config_dict = {**nested, "model_type": cls.model_type}
        return config_dict

    def _check_tower(self) -> None:
        check_positive_ints(self, _TOWER_SIZES)
        check_heads_divide(self)
        if not 0.0 <= float(self.attention_dropout) < 1.0:
            raise ConfigError(f"attention_dropout={self.attention_dropout!r} must be in [0, 1)")


class CLIPTextConfig(TowerConfig):
    """CLIP's text tower: a causal pre-norm transformer pooled at the end-of-text token."""

    model_type = "clip_text_model"
    composite_model_type = "clip"
    composite_key = "text_config"

    def __init__(
        self,
        vocab_size: int = 49408,
        hidden_size: int = 512,
        intermediate_size: int = 2048,
        projection_dim: int = 512,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 8,
        max_position_embeddings: int = 77,
        hidden_act: str = "quick_gelu",
        layer_norm_eps: float = 1e-5,
        attention_dropout: float = 0.0,
        initializer_range: float = 0.02,
        initializer_factor: float = 1.0,
        pad_token_id: int | None = 1,
        bos_token_id: int | None = 49406,
        eos_token_id: int | None = 49407,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.projection_dim = projection_dim
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.hidden_act = hidden_act
        self.layer_norm_eps = layer_norm_eps
        self.attention_dropout = attention_dropout
        self.initializer_range = initializer_range
        self.initializer_factor = initializer_factor
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self._check_tower()
        check_positive_ints(self, ("vocab_size", "max_position_embeddings", "projection_dim"))


class CLIPVisionConfig(TowerConfig):
    """CLIP's vision tower: a ViT with a class embedding, pre- and post-LayerNorm."""

    model_type = "clip_vision_model"
    composite_model_type = "clip"
    composite_key = "vision_config"

    def __init__(
        self,
        hidden_size: int = 768,
        intermediate_size: int = 3072,
        projection_dim: int = 512,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        num_channels: int = 3,
        image_size: int = 224,
        patch_size: int = 32,
        hidden_act: str = "quick_gelu",
        layer_norm_eps: float = 1e-5,
        attention_dropout: float = 0.0,
        initializer_range: float = 0.02,
        initializer_factor: float = 1.0,
        **kwargs: Any,
    ) -> None:
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.projection_dim = projection_dim
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_channels = num_channels
        self.image_size = _square_side(image_size, "image_size")
        self.patch_size = _square_side(patch_size, "patch_size")
        self.hidden_act = hidden_act
        self.layer_norm_eps = layer_norm_eps
        self.attention_dropout = attention_dropout
        self.initializer_range = initializer_range
        self.initializer_factor = initializer_factor
        super().__init__(**kwargs)
        self._check_tower()
        check_positive_ints(self, ("num_channels", "projection_dim"))
        if self.patch_size > self.image_size:
            raise ConfigError(f"patch_size={self.patch_size} is larger than image_size={self.image_size}")


def two_tower_configs(
    text_class: type[TowerConfig],
    vision_class: type[TowerConfig],
    text_config: Any,
    vision_config: Any,
    kwargs: dict[str, Any],
) -> tuple[TowerConfig, TowerConfig]:
    """The two tower configs from dicts, config objects or None (defaults). Legacy ``text_config_dict`` /
    ``vision_config_dict`` keys (older files) are merged over the nested sections, as the reference does."""
    towers = []
    for key, tower_class, given in (
        ("text_config", text_class, text_config),
        ("vision_config", vision_class, vision_config),
    ):
        if isinstance(given, PretrainedConfig):
            given = given.to_dict()
        if given is not None and not isinstance(given, dict):
            raise ConfigError(f"{key} must be a dict or a {tower_class.__name__}, got {type(given).__name__}")
        merged = dict(given or {})
        legacy = kwargs.pop(f"{key}_dict", None)
        if legacy:
            merged.update(legacy)
        merged.pop("model_type", None)
        merged.pop("transformers_version", None)
        towers.append(tower_class(**merged))
    return towers[0], towers[1]


class CLIPConfig(PretrainedConfig):
    """``text_config`` + ``vision_config`` (nested), ``projection_dim`` and the initial ``logit_scale``."""

    model_type = "clip"
    text_config_class: ClassVar[type[TowerConfig]] = CLIPTextConfig
    vision_config_class: ClassVar[type[TowerConfig]] = CLIPVisionConfig

    def __init__(
        self,
        text_config: dict[str, Any] | CLIPTextConfig | None = None,
        vision_config: dict[str, Any] | CLIPVisionConfig | None = None,
        projection_dim: int = 512,
        logit_scale_init_value: float = 2.6592,
        initializer_factor: float = 1.0,
        **kwargs: Any,
    ) -> None:
        self.text_config, self.vision_config = two_tower_configs(
            self.text_config_class, self.vision_config_class, text_config, vision_config, kwargs
        )
        self.projection_dim = projection_dim
        self.logit_scale_init_value = logit_scale_init_value
        self.initializer_factor = initializer_factor
        super().__init__(**kwargs)
        check_positive_ints(self, ("projection_dim",))

    @classmethod
    def from_text_vision_configs(
        cls, text_config: CLIPTextConfig, vision_config: CLIPVisionConfig, **kwargs: Any
    ) -> CLIPConfig:
        return cls(text_config=text_config.to_dict(), vision_config=vision_config.to_dict(), **kwargs)

"""``DeiTConfig``: ``model_type: deit`` (distilled DeiT checkpoints); ViT's settings. Imports no torch."""

from __future__ import annotations

from .configuration_vit import ViTConfig


class DeiTConfig(ViTConfig):
    """ViT with a distillation token next to the [CLS] token."""

    model_type = "deit"

"""DeiT: ViT plus a distillation token after the [CLS] token (positions for both), and its heads.

Everything but the embeddings is ViT's (``modeling_vit.py``); the parameter names are the reference's under the
``deit.`` prefix (``deit.embeddings.distillation_token``, ``cls_classifier.weight``, ``distillation_classifier.weight``).
``DeiTForImageClassification`` classifies the final [CLS] state; ``DeiTForImageClassificationWithTeacher`` (the
released distilled checkpoints) averages a [CLS] classifier and a distillation-token classifier.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers.outputs import ModelOutput

from .configuration_deit import DeiTConfig
from .modeling_vit import (
    ViTConfig,
    ViTEmbeddings,
    ViTForImageClassification,
    ViTModel,
    ViTPreTrainedModel,
)

__all__ = [
    "DeiTConfig",
    "DeiTForImageClassification",
    "DeiTForImageClassificationWithTeacher",
    "DeiTForImageClassificationWithTeacherOutput",
    "DeiTModel",
]


class DeiTEmbeddings(ViTEmbeddings):
    """[CLS] and distillation tokens, then the patches; positions for all (interpolated for other image sizes)."""

    num_prefix_tokens: ClassVar[int] = 2

    def __init__(self, config: ViTConfig, use_mask_token: bool = False) -> None:
        super().__init__(config, use_mask_token=use_mask_token)
        self.distillation_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))

    def prefix_tokens(self, batch: int) -> torch.Tensor:
        return torch.cat((self.cls_token, self.distillation_token), dim=1).expand(batch, -1, -1)


class DeiTPreTrainedModel(ViTPreTrainedModel):
    config_class = DeiTConfig
    base_model_prefix = "deit"
    _no_split_modules: ClassVar[list[str]] = ["DeiTEmbeddings", "ViTLayer"]

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, DeiTEmbeddings):
            nn.init.trunc_normal_(module.distillation_token, mean=0.0, std=self.config.initializer_range)


class DeiTModel(DeiTPreTrainedModel, ViTModel):
    """``ViTModel`` with DeiT's embeddings; ``hidden_states`` and outputs have two tokens before the patches."""

    embeddings_class: ClassVar[type[ViTEmbeddings]] = DeiTEmbeddings


class DeiTForImageClassification(DeiTPreTrainedModel, ViTForImageClassification):
    """ViT's classifier on the final [CLS] state, over ``DeiTModel`` (held as ``deit``)."""

    def __init__(self, config: DeiTConfig) -> None:
        DeiTPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.deit = DeiTModel(config, add_pooling_layer=False)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()
        self.post_init()


class DeiTForImageClassificationWithTeacherOutput(ModelOutput):
    logits: Any
    cls_logits: Any
    distillation_logits: Any
    hidden_states: Any
    attentions: Any


class DeiTForImageClassificationWithTeacher(DeiTPreTrainedModel):
    """``logits`` = the mean of a classifier on the [CLS] state and one on the distillation token (inference only)."""

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.deit = DeiTModel(config, add_pooling_layer=False)
        width, labels = config.hidden_size, config.num_labels
        self.cls_classifier = nn.Linear(width, labels) if labels > 0 else nn.Identity()
        self.distillation_classifier = nn.Linear(width, labels) if labels > 0 else nn.Identity()
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.deit.get_input_embeddings()

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> DeiTForImageClassificationWithTeacherOutput | tuple[Any, ...]:
        outputs = self.deit(
            pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            attention_mask=attention_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            _last_layer_rows=2,  # the classifiers read the final [CLS] and distillation states only
        )
        sequence = outputs.last_hidden_state
        cls_logits = self.cls_classifier(sequence[:, 0, :])
        distillation_logits = self.distillation_classifier(sequence[:, 1, :])
        output = DeiTForImageClassificationWithTeacherOutput(
            logits=(cls_logits + distillation_logits) / 2,
            cls_logits=cls_logits,
            distillation_logits=distillation_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return self._returned(output, return_dict)

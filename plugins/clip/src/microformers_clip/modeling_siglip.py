"""SigLIP: CLIP's two towers trained with a sigmoid loss (each text-image pair judged on its own).

Where the math is CLIP's, the classes are CLIP's (``modeling_clip.py``): attention, MLP, pre-norm layer, encoder and
text embeddings. What differs is here, in reading order: vision embeddings (patches with a bias, no class token),
the attention-pooling head of the vision tower, the pre-trained base class, ``SiglipTextModel`` (bidirectional,
pooled at the last position, then ``head``), ``SiglipVisionModel``, ``SiglipModel`` (``logits = cos * exp(logit_scale)
+ logit_bias``, the sigmoid loss) and ``SiglipForImageClassification``.

Parameter names equal the reference implementation's checkpoint tensor names (``text_model.head.weight``,
``vision_model.embeddings.patch_embedding.bias``, ``vision_model.head.probe``,
``vision_model.head.attention.in_proj_weight``, ``vision_model.head.attention.out_proj.weight``,
``vision_model.head.layernorm.weight``, ``vision_model.head.mlp.fc1.weight``, ``logit_scale``, ``logit_bias``, and
CLIP's names for the encoder layers).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import ConfigError
from microformers_sdk.attention import get_attention_function
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import BaseModelOutputWithPooling

from .configuration_siglip import SiglipConfig, SiglipTextConfig, SiglipVisionConfig
from .modeling_clip import (
    CLIPMLP,
    CLIPEncoder,
    CLIPForImageClassification,
    CLIPInputError,
    CLIPModel,
    CLIPOutput,
    CLIPPreTrainedModel,
    CLIPTextEmbeddings,
    check_pixel_values,
    interpolate_grid,
)

__all__ = [
    "SiglipForImageClassification",
    "SiglipModel",
    "SiglipMultiheadAttentionPoolingHead",
    "SiglipOutput",
    "SiglipPreTrainedModel",
    "SiglipTextModel",
    "SiglipVisionModel",
    "sigmoid_loss",
]

SiglipOutput = CLIPOutput


def sigmoid_loss(logits_per_text: torch.Tensor) -> torch.Tensor:
    """SigLIP's loss: every pair is a binary decision, +1 on the diagonal (text i with image i) and -1 elsewhere;
    the negative log-sigmoid summed over each text's row, averaged over texts."""
    signs = 2 * torch.eye(logits_per_text.shape[0], device=logits_per_text.device) - 1
    return -nn.functional.logsigmoid(signs * logits_per_text).sum(dim=-1).mean()


# -- embeddings ----------------------------------------------------------------------------------------
class SiglipVisionEmbeddings(nn.Module):
    """Patches (a Conv2d with bias) plus learned positions, one per patch; no class token."""

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__()
        self.image_size = config.image_size
        self.patch_size = config.patch_size
        self.num_channels = config.num_channels
        self.patch_embedding = nn.Conv2d(
            config.num_channels, config.hidden_size, kernel_size=self.patch_size, stride=self.patch_size
        )
        self.num_patches = (self.image_size // self.patch_size) ** 2
        self.position_embedding = nn.Embedding(self.num_patches, config.hidden_size)

    def interpolate_pos_encoding(self, embeddings: torch.Tensor, height: int, width: int) -> torch.Tensor:
        positions = self.position_embedding.weight[None]
        if not torch.jit.is_tracing() and embeddings.shape[1] == positions.shape[1] and height == width:
            return positions
        return interpolate_grid(positions, height // self.patch_size, width // self.patch_size)

    def forward(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False) -> torch.Tensor:
        _, _, height, width = check_pixel_values(pixel_values, self.num_channels, self.patch_size).shape
        if not interpolate_pos_encoding and (height, width) != (self.image_size, self.image_size):
            raise CLIPInputError(
                f"the image is {height}x{width} but the model was built for {self.image_size}x{self.image_size}; "
                "resize it (the image processor does) or pass interpolate_pos_encoding=True"
            )
        patches = self.patch_embedding(pixel_values.to(self.patch_embedding.weight.dtype)).flatten(2).transpose(1, 2)
        if interpolate_pos_encoding:
            return patches + self.interpolate_pos_encoding(patches, height, width)
        return patches + self.position_embedding.weight[None]


# -- the vision tower's pooling head -------------------------------------------------------------------
class SiglipMultiheadAttentionPoolingHead(nn.Module):
    """A learned ``probe`` query attends over all tokens (``torch.nn.MultiheadAttention``), then a pre-norm MLP
    with a residual; the probe's result is the pooled image vector."""

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__()
        self.probe = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.attention = nn.MultiheadAttention(config.hidden_size, config.num_attention_heads, batch_first=True)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = CLIPMLP(config)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        probe = self.probe.expand(hidden_states.shape[0], -1, -1)
        pooled = self.attention(probe, hidden_states, hidden_states, need_weights=False)[0]
        pooled = pooled + self.mlp(self.layernorm(pooled))
        return pooled[:, 0]


# -- pre-trained base class ----------------------------------------------------------------------------
class SiglipPreTrainedModel(CLIPPreTrainedModel):
    """Weight init shared by the SigLIP classes."""

    config_class = SiglipConfig
    base_model_prefix = "siglip"
    _no_split_modules: ClassVar[list[str]] = [
        "CLIPTextEmbeddings",
        "CLIPEncoderLayer",
        "SiglipVisionEmbeddings",
        "SiglipMultiheadAttentionPoolingHead",
    ]

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.MultiheadAttention):
            nn.init.xavier_uniform_(module.in_proj_weight)
            nn.init.zeros_(module.in_proj_bias)
            nn.init.xavier_uniform_(module.out_proj.weight)
            nn.init.zeros_(module.out_proj.bias)
        elif isinstance(module, (nn.Linear, nn.Conv2d)):
            fan_in = module.weight[0].numel()
            nn.init.normal_(module.weight, std=1.0 / math.sqrt(fan_in))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=1.0 / math.sqrt(module.embedding_dim))
        elif isinstance(module, SiglipMultiheadAttentionPoolingHead):
            nn.init.xavier_uniform_(module.probe)
        elif isinstance(module, SiglipModel):
            # The SigLIP paper's starting point: temperature 10, bias -10 (most pairs are negatives).
            nn.init.constant_(module.logit_scale, math.log(10.0))
            nn.init.constant_(module.logit_bias, -10.0)
        else:
            PreTrainedModel._init_weights(self, module)


# -- the towers ----------------------------------------------------------------------------------------
class SiglipTextModel(SiglipPreTrainedModel):
    """CLIP's text embeddings and encoder without the causal mask, ``final_layer_norm``; ``pooler_output`` is
    ``head`` of the last position's state (SigLIP pads every text to the same length)."""

    config_class = SiglipTextConfig
    base_model_prefix = "text_model"
    main_input_name = "input_ids"
    config: SiglipTextConfig

    def __init__(self, config: SiglipTextConfig) -> None:
        super().__init__(config)
        self.embeddings = CLIPTextEmbeddings(config)
        self.encoder = CLIPEncoder(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.head = nn.Linear(config.hidden_size, config.projection_size)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.token_embedding

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.token_embedding = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple[Any, ...]:
        if input_ids is None:
            raise CLIPInputError("the text model needs input_ids (batch, length)")
        input_ids = input_ids.view(-1, input_ids.shape[-1])
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        hidden_states = self.embeddings(input_ids=input_ids, position_ids=position_ids)
        mask, _ = build_attention_mask(
            attention_mask, hidden_states.shape[1], 0, causal=False, device=hidden_states.device
        )
        hidden_states, all_hidden_states, all_attentions = self.encoder(
            hidden_states, mask, False, get_attention_function(self.config), output_attentions, self._call_layer
        )
        last_hidden_state = self.final_layer_norm(hidden_states)
        output = BaseModelOutputWithPooling(
            last_hidden_state=last_hidden_state,
            pooler_output=self.head(last_hidden_state[:, -1, :]),
            hidden_states=all_hidden_states if output_hidden_states else None,
            attentions=all_attentions if output_attentions else None,
        )
        return self._returned(output, return_dict)


class SiglipVisionModel(SiglipPreTrainedModel):
    """Embeddings, encoder, ``post_layernorm`` (applied to ``last_hidden_state``); ``pooler_output`` is the
    attention-pooling ``head`` (None with ``vision_use_head=False``)."""

    config_class = SiglipVisionConfig
    base_model_prefix = "vision_model"
    main_input_name = "pixel_values"
    config: SiglipVisionConfig

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__(config)
        self.embeddings = SiglipVisionEmbeddings(config)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.head = SiglipMultiheadAttentionPoolingHead(config) if config.vision_use_head else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.patch_embedding

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple[Any, ...]:
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        hidden_states = self.embeddings(pixel_values, bool(interpolate_pos_encoding))
        hidden_states, all_hidden_states, all_attentions = self.encoder(
            hidden_states, None, False, get_attention_function(self.config), output_attentions, self._call_layer
        )
        last_hidden_state = self.post_layernorm(hidden_states)
        output = BaseModelOutputWithPooling(
            last_hidden_state=last_hidden_state,
            pooler_output=self.head(last_hidden_state) if self.head is not None else None,
            hidden_states=all_hidden_states if output_hidden_states else None,
            attentions=all_attentions if output_attentions else None,
        )
        return self._returned(output, return_dict)


# -- the two-tower model -------------------------------------------------------------------------------
class SiglipModel(SiglipPreTrainedModel, CLIPModel):
    """CLIP's two-tower forward with SigLIP's towers (their heads already project), ``logit_scale`` and
    ``logit_bias`` (``logits = cos * exp(logit_scale) + logit_bias``; ``sigmoid(logits)`` are the probabilities) and
    the sigmoid loss for ``return_loss=True``."""

    config: SiglipConfig
    text_model_class: ClassVar[type[PreTrainedModel]] = SiglipTextModel
    vision_model_class: ClassVar[type[PreTrainedModel]] = SiglipVisionModel

    def _build_heads(self, config: SiglipConfig) -> None:
        if not config.vision_config.vision_use_head:
            raise ConfigError(
                "SiglipModel needs the vision tower's pooling head (vision_config.vision_use_head=True) to compare "
                "images with texts"
            )
        self.logit_scale = nn.Parameter(torch.zeros(1))
        self.logit_bias = nn.Parameter(torch.zeros(1))

    def _project_text(self, pooled: torch.Tensor) -> torch.Tensor:
        return pooled

    def _project_image(self, pooled: torch.Tensor) -> torch.Tensor:
        return pooled

    def _similarity(self, text_embeds: torch.Tensor, image_embeds: torch.Tensor) -> torch.Tensor:
        device = text_embeds.device
        scaled = text_embeds @ image_embeds.t().to(device) * self.logit_scale.exp().to(device)
        return scaled + self.logit_bias.to(device)

    def _loss(self, logits_per_text: torch.Tensor) -> torch.Tensor:
        return sigmoid_loss(logits_per_text)


class SiglipForImageClassification(SiglipPreTrainedModel, CLIPForImageClassification):
    """The vision tower and a linear ``classifier`` on the mean of all tokens' final (post-normalised) states."""

    config: SiglipConfig
    vision_model_class: ClassVar[type[PreTrainedModel]] = SiglipVisionModel
    pooled_from: ClassVar[int] = 0

"""DINOv2 and its image-classification head, written out top to bottom.

DINOv2 is ViT's encoder with: positions always interpolated to the image's patch grid (in float32), a per-channel
layer scale after attention and after the MLP, stochastic depth (``drop_path_rate``), an optional SwiGLU MLP, a
pooler that is the final [CLS] state, and a classifier on ``[CLS, mean of the patch tokens]``. The attention
(``attention.attention.query/key/value``, ``attention.output.dense``) and the patch embedding (a ``Conv2d``
``projection``) are ViT's, subclassed from ``microformers-vit``.

Reading order: embeddings, layer scale, MLPs (GELU ``fc1``/``fc2`` or SwiGLU ``weights_in``/``weights_out``), drop
path, layer (``norm1``, ``norm2``), encoder, the pre-trained base class, ``Dinov2Model``, then
``Dinov2ForImageClassification``. Parameter names equal the reference's checkpoint tensor names
(``dinov2.embeddings.mask_token``, ``dinov2.encoder.layer.{i}.layer_scale1.lambda1``,
``dinov2.encoder.layer.{i}.mlp.weights_in.weight``, ``dinov2.layernorm.weight``, ``classifier.weight``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import InputError
from microformers.outputs import ModelOutput
from microformers_sdk.attention import AttentionFunction, get_attention_function
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import sequence_classification_loss
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import BaseModelOutputWithPooling
from microformers_vit import ImageClassifierOutput, ViTAttention, ViTEncoder, ViTInputError, ViTPatchEmbeddings

from .configuration_dinov2 import Dinov2Config

__all__ = ["Dinov2Config", "Dinov2ForImageClassification", "Dinov2Model", "Dinov2PreTrainedModel"]

LayerOutput = tuple[torch.Tensor, torch.Tensor | None]


# -- embeddings ----------------------------------------------------------------------------------------
class Dinov2Embeddings(nn.Module):
    """[CLS] token + patch embeddings (masked patches replaced by ``mask_token``), plus interpolated positions."""

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.mask_token = nn.Parameter(torch.zeros(1, config.hidden_size)) if config.use_mask_token else None
        self.patch_embeddings = ViTPatchEmbeddings(config)
        self.position_embeddings = nn.Parameter(
            torch.zeros(1, self.patch_embeddings.num_patches + 1, config.hidden_size)
        )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def interpolate_pos_encoding(self, embeddings: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """The position embeddings resized (bicubic in float32, as the reference) to the image's patch grid."""
        num_patches = embeddings.shape[1] - 1
        num_positions = self.position_embeddings.shape[1] - 1
        if not torch.jit.is_tracing() and num_patches == num_positions and height == width:
            return self.position_embeddings
        class_pos = self.position_embeddings[:, :1]
        patch_pos = self.position_embeddings[:, 1:]
        dim = embeddings.shape[-1]
        side = int(math.sqrt(num_positions))
        if side * side != num_positions:
            raise InputError(f"DINOv2 needs a square grid of learned positions; this model has {num_positions}")
        patch_h, patch_w = self.patch_embeddings.patch_size
        grid = patch_pos.reshape(1, side, side, dim).permute(0, 3, 1, 2)
        grid = nn.functional.interpolate(
            grid.to(torch.float32), size=(height // patch_h, width // patch_w), mode="bicubic", align_corners=False
        ).to(patch_pos.dtype)
        return torch.cat((class_pos, grid.permute(0, 2, 3, 1).reshape(1, -1, dim)), dim=1)

    def forward(self, pixel_values: torch.Tensor, bool_masked_pos: torch.Tensor | None = None) -> torch.Tensor:
        if pixel_values.dim() != 4:  # read below before the patch embeddings check channels and size
            raise ViTInputError(
                f"pixel_values has shape {tuple(pixel_values.shape)}; pass (batch, channels, height, width) "
                "as the image processor returns it"
            )
        _, _, height, width = pixel_values.shape
        embeddings = self.patch_embeddings(pixel_values.to(self.patch_embeddings.projection.weight.dtype))
        batch, length, _ = embeddings.shape
        if bool_masked_pos is not None:
            if self.mask_token is None:
                raise InputError("bool_masked_pos needs a model with use_mask_token=True")
            mask = bool_masked_pos.unsqueeze(-1).type_as(embeddings)
            embeddings = embeddings * (1 - mask) + self.mask_token.expand(batch, length, -1) * mask
        embeddings = torch.cat((self.cls_token.expand(batch, -1, -1), embeddings), dim=1)
        embeddings = embeddings + self.interpolate_pos_encoding(embeddings, height, width)
        return self.dropout(embeddings)


# -- layer scale, MLPs, drop path ----------------------------------------------------------------------
class Dinov2LayerScale(nn.Module):
    """``x * lambda1``: a learned per-channel scale on each residual branch."""

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.lambda1 = nn.Parameter(config.layerscale_value * torch.ones(config.hidden_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states * self.lambda1


class Dinov2MLP(nn.Module):
    """``fc2(act(fc1(x)))`` through ``hidden_size * mlp_ratio`` features."""

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        width = int(config.hidden_size * config.mlp_ratio)
        self.fc1 = nn.Linear(config.hidden_size, width)
        self.activation = get_activation(config.hidden_act)
        self.fc2 = nn.Linear(width, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation(self.fc1(hidden_states)))


class Dinov2SwiGLUFFN(nn.Module):
    """``weights_out(silu(a) * b)`` where ``[a, b] = weights_in(x)``, as in the released checkpoints.

    The width is 2/3 of ``hidden_size * mlp_ratio`` rounded up to a multiple of 8.
    """

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        width = (int(int(config.hidden_size * config.mlp_ratio) * 2 / 3) + 7) // 8 * 8
        self.weights_in = nn.Linear(config.hidden_size, 2 * width)
        self.weights_out = nn.Linear(width, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gate, up = self.weights_in(hidden_states).chunk(2, dim=-1)
        return self.weights_out(nn.functional.silu(gate) * up)


class Dinov2DropPath(nn.Module):
    """Stochastic depth: in training, drop a sample's whole residual branch with probability ``drop_prob``."""

    def __init__(self, drop_prob: float) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.drop_prob == 0.0 or not self.training:
            return hidden_states
        keep = 1 - self.drop_prob
        shape = (hidden_states.shape[0],) + (1,) * (hidden_states.ndim - 1)
        noise = torch.rand(shape, dtype=hidden_states.dtype, device=hidden_states.device)
        return hidden_states.div(keep) * torch.floor(noise + keep)


# -- layer, encoder ------------------------------------------------------------------------------------
class Dinov2Layer(nn.Module):
    """Pre-norm block with layer scale: ``x + drop(ls1(attn(norm1(x))))`` then ``x + drop(ls2(mlp(norm2(x))))``."""

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = ViTAttention(config)
        self.layer_scale1 = Dinov2LayerScale(config)
        self.drop_path = Dinov2DropPath(float(config.drop_path_rate))
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = Dinov2SwiGLUFFN(config) if config.use_swiglu_ffn else Dinov2MLP(config)
        self.layer_scale2 = Dinov2LayerScale(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> LayerOutput:
        attended, weights = self.attention(self.norm1(hidden_states), attention_mask, attention_fn, output_attentions)
        hidden_states = self.drop_path(self.layer_scale1(attended)) + hidden_states
        hidden_states = self.drop_path(self.layer_scale2(self.mlp(self.norm2(hidden_states)))) + hidden_states
        return hidden_states, weights


class Dinov2Encoder(ViTEncoder):
    """ViT's encoder loop over DINOv2 layers."""

    layer_class = Dinov2Layer


# -- pre-trained base class ----------------------------------------------------------------------------
class Dinov2PreTrainedModel(PreTrainedModel):
    """Weight init and conventions shared by ``Dinov2Model`` and its head."""

    config_class = Dinov2Config
    base_model_prefix = "dinov2"
    main_input_name = "pixel_values"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["Dinov2Embeddings", "Dinov2Layer"]
    # Old exports lack the (pre-training only) mask token.
    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = [r"embeddings\.mask_token$"]
    config: Dinov2Config

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.trunc_normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, Dinov2Embeddings):
            nn.init.trunc_normal_(module.position_embeddings, mean=0.0, std=std)
            nn.init.trunc_normal_(module.cls_token, mean=0.0, std=std)
            if module.mask_token is not None:
                nn.init.zeros_(module.mask_token)
        elif isinstance(module, Dinov2LayerScale):
            nn.init.constant_(module.lambda1, self.config.layerscale_value)
        else:
            super()._init_weights(module)

    def _returned(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


# -- base model ----------------------------------------------------------------------------------------
class Dinov2Model(Dinov2PreTrainedModel):
    """Embeddings, encoder and final LayerNorm; ``pooler_output`` is the final [CLS] state.

    Any image size works (positions are interpolated); ``hidden_states`` holds the embedding output and every
    layer's output (``num_hidden_layers + 1`` tensors, the last before the final LayerNorm).
    """

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__(config)
        self.embeddings = Dinov2Embeddings(config)
        self.encoder = Dinov2Encoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.patch_embeddings

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        bool_masked_pos: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPooling | tuple[Any, ...]:
        if pixel_values is None:
            raise InputError("Dinov2Model needs pixel_values (batch, channels, height, width)")
        config = self.config
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        hidden_states = self.embeddings(pixel_values, bool_masked_pos)
        mask, _ = build_attention_mask(
            attention_mask, hidden_states.shape[1], 0, causal=False, device=hidden_states.device
        )
        hidden_states, all_hidden_states, all_attentions = self.encoder(
            hidden_states, mask, get_attention_function(config), output_attentions, self._call_layer
        )
        sequence_output = self.layernorm(hidden_states)
        output = BaseModelOutputWithPooling(
            last_hidden_state=sequence_output,
            pooler_output=sequence_output[:, 0, :],
            hidden_states=all_hidden_states if output_hidden_states else None,
            attentions=all_attentions if output_attentions else None,
        )
        return self._returned(output, return_dict)


# -- heads ---------------------------------------------------------------------------------------------
class Dinov2ForImageClassification(Dinov2PreTrainedModel):
    """A linear classifier on ``[CLS state, mean of the patch states]``; the loss follows ``config.problem_type``."""

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dinov2 = Dinov2Model(config)
        self.classifier = (
            nn.Linear(config.hidden_size * 2, config.num_labels) if config.num_labels > 0 else nn.Identity()
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.dinov2.get_input_embeddings()

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> ImageClassifierOutput | tuple[Any, ...]:
        outputs = self.dinov2(
            pixel_values,
            attention_mask=attention_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        sequence = outputs.last_hidden_state
        logits = self.classifier(torch.cat([sequence[:, 0], sequence[:, 1:].mean(dim=1)], dim=1))
        output = ImageClassifierOutput(
            loss=sequence_classification_loss(logits, labels, self.config) if labels is not None else None,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return self._returned(output, return_dict)

"""CLIP: a text tower and a vision tower trained so that matching captions and images land close together.

Reading order: output dataclasses, text embeddings, vision embeddings (class embedding, positions, interpolation for
other image sizes), attention, MLP, pre-norm layer, encoder, the pre-trained base class, ``CLIPTextModel``,
``CLIPVisionModel``, ``CLIPModel`` (projections, cosine logits scaled by ``exp(logit_scale)``, the symmetric
contrastive loss), then ``CLIPTextModelWithProjection``, ``CLIPVisionModelWithProjection`` and
``CLIPForImageClassification``. The configurations are in ``configuration_clip.py``. SigLIP
(``modeling_siglip.py``) reuses the attention, MLP, layer, encoder and text embeddings from here.

Parameter names equal the reference implementation's checkpoint tensor names (``text_model.embeddings.token_embedding
.weight``, ``text_model.encoder.layers.{i}.self_attn.q_proj.weight``, ``text_model.encoder.layers.{i}.layer_norm1
.weight``, ``text_model.encoder.layers.{i}.mlp.fc1.weight``, ``text_model.final_layer_norm.weight``,
``vision_model.embeddings.class_embedding``, ``vision_model.embeddings.patch_embedding.weight``,
``vision_model.pre_layrnorm.weight`` (sic), ``vision_model.post_layernorm.weight``, ``text_projection.weight``,
``visual_projection.weight``, ``logit_scale``). A tower saved on its own has no ``text_model.`` /
``vision_model.`` prefix, as the reference saves it; either form loads into either class.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import InputError
from microformers.outputs import ModelOutput
from microformers_sdk.attention import AttentionFunction, eager_attention, get_attention_function
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import sequence_classification_loss
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import BaseModelOutputWithPooling

from .configuration_clip import CLIPConfig, CLIPTextConfig, CLIPVisionConfig

__all__ = [
    "CLIPMLP",
    "CLIPAttention",
    "CLIPEncoder",
    "CLIPEncoderLayer",
    "CLIPForImageClassification",
    "CLIPInputError",
    "CLIPModel",
    "CLIPOutput",
    "CLIPPreTrainedModel",
    "CLIPTextEmbeddings",
    "CLIPTextModel",
    "CLIPTextModelOutput",
    "CLIPTextModelWithProjection",
    "CLIPVisionModel",
    "CLIPVisionModelOutput",
    "CLIPVisionModelWithProjection",
    "ImageClassifierOutput",
    "contrastive_loss",
    "interpolate_grid",
]

# What a layer returns: its hidden states and, with ``output_attentions``, its attention probabilities.
LayerOutput = tuple[torch.Tensor, torch.Tensor | None]


class CLIPInputError(InputError):
    """The inputs do not fit the model (missing, wrong shape, image size, sequence length)."""


class CLIPOutput(ModelOutput):
    loss: Any
    logits_per_image: Any
    logits_per_text: Any
    text_embeds: Any
    image_embeds: Any
    text_model_output: Any
    vision_model_output: Any

    def to_tuple(self) -> tuple[Any, ...]:
        """The towers' outputs become tuples too, as the reference returns them with ``return_dict=False``."""
        return tuple(v.to_tuple() if isinstance(v, ModelOutput) else v for v in self.values())


class CLIPTextModelOutput(ModelOutput):
    text_embeds: Any
    last_hidden_state: Any
    hidden_states: Any
    attentions: Any


class CLIPVisionModelOutput(ModelOutput):
    image_embeds: Any
    last_hidden_state: Any
    hidden_states: Any
    attentions: Any


class ImageClassifierOutput(ModelOutput):
    loss: Any
    logits: Any
    hidden_states: Any
    attentions: Any


def contrastive_loss(logits_per_text: torch.Tensor) -> torch.Tensor:
    """CLIP's symmetric loss: text i should pick image i and image i text i (cross-entropy both ways, averaged)."""
    targets = torch.arange(logits_per_text.shape[0], device=logits_per_text.device)
    caption_loss = nn.functional.cross_entropy(logits_per_text, targets)
    image_loss = nn.functional.cross_entropy(logits_per_text.t(), targets)
    return (caption_loss + image_loss) / 2.0


def interpolate_grid(positions: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``(1, side*side, dim)`` learned patch positions resized (bicubic, as the reference) to a ``height x width``
    patch grid: ``(1, height*width, dim)``. The learned grid is square in every released checkpoint."""
    count, dim = positions.shape[1], positions.shape[2]
    side = math.isqrt(count)
    if side * side != count:
        raise CLIPInputError(
            f"interpolate_pos_encoding needs a square grid of learned positions; this model has {count}"
        )
    grid = positions.reshape(1, side, side, dim).permute(0, 3, 1, 2)
    grid = nn.functional.interpolate(grid, size=(height, width), mode="bicubic", align_corners=False)
    return grid.permute(0, 2, 3, 1).reshape(1, -1, dim)


def check_pixel_values(pixel_values: torch.Tensor | None, num_channels: int, patch_size: int) -> torch.Tensor:
    """A ``(batch, channels, height, width)`` tensor with the model's channel count, at least one patch big."""
    if pixel_values is None:
        raise CLIPInputError("the vision model needs pixel_values (batch, channels, height, width)")
    if pixel_values.dim() != 4:
        raise CLIPInputError(
            f"pixel_values has shape {tuple(pixel_values.shape)}; pass (batch, channels, height, width) "
            "as the image processor returns it"
        )
    channels, height, width = pixel_values.shape[1:]
    if channels != num_channels:
        raise CLIPInputError(f"pixel_values has {channels} channels but the config says num_channels={num_channels}")
    if height < patch_size or width < patch_size:
        raise CLIPInputError(f"the image ({height}x{width}) is smaller than one patch ({patch_size}x{patch_size})")
    return pixel_values


# -- embeddings ----------------------------------------------------------------------------------------
class CLIPTextEmbeddings(nn.Module):
    """``token_embedding`` plus learned ``position_embedding`` (positions ``0..length-1`` unless given)."""

    def __init__(self, config: CLIPTextConfig) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embedding = nn.Embedding(config.max_position_embeddings, config.hidden_size)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            if input_ids is None:
                raise CLIPInputError("the text model needs input_ids (or inputs_embeds)")
            vocab = self.token_embedding.num_embeddings
            if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
                raise CLIPInputError(f"input_ids holds ids outside the vocabulary [0, {vocab})")
            inputs_embeds = self.token_embedding(input_ids)
        length = inputs_embeds.shape[1]
        limit = self.position_embedding.num_embeddings
        if length > limit:
            raise CLIPInputError(
                f"the text is {length} tokens long but the model has max_position_embeddings={limit}; "
                f"truncate it (tokenizer(..., truncation=True, max_length={limit}))"
            )
        if position_ids is None:
            position_ids = torch.arange(length, device=inputs_embeds.device)[None]
        return inputs_embeds + self.position_embedding(position_ids)


class CLIPVisionEmbeddings(nn.Module):
    """``class_embedding`` then the patches (a bias-free Conv2d), plus learned positions (interpolated for other
    image sizes with ``interpolate_pos_encoding=True``)."""

    def __init__(self, config: CLIPVisionConfig) -> None:
        super().__init__()
        self.embed_dim = config.hidden_size
        self.image_size = config.image_size
        self.patch_size = config.patch_size
        self.num_channels = config.num_channels
        self.class_embedding = nn.Parameter(torch.zeros(config.hidden_size))
        self.patch_embedding = nn.Conv2d(
            config.num_channels, config.hidden_size, kernel_size=self.patch_size, stride=self.patch_size, bias=False
        )
        self.num_patches = (self.image_size // self.patch_size) ** 2
        self.position_embedding = nn.Embedding(self.num_patches + 1, config.hidden_size)

    def interpolate_pos_encoding(self, embeddings: torch.Tensor, height: int, width: int) -> torch.Tensor:
        positions = self.position_embedding.weight[None]
        if not torch.jit.is_tracing() and embeddings.shape[1] == positions.shape[1] and height == width:
            return positions
        grid = interpolate_grid(positions[:, 1:], height // self.patch_size, width // self.patch_size)
        return torch.cat((positions[:, :1], grid), dim=1)

    def forward(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False) -> torch.Tensor:
        batch, _, height, width = check_pixel_values(pixel_values, self.num_channels, self.patch_size).shape
        if not interpolate_pos_encoding and (height, width) != (self.image_size, self.image_size):
            raise CLIPInputError(
                f"the image is {height}x{width} but the model was built for {self.image_size}x{self.image_size}; "
                "resize it (the image processor does) or pass interpolate_pos_encoding=True"
            )
        patches = self.patch_embedding(pixel_values.to(self.patch_embedding.weight.dtype)).flatten(2).transpose(1, 2)
        embeddings = torch.cat((self.class_embedding.expand(batch, 1, -1), patches), dim=1)
        if interpolate_pos_encoding:
            return embeddings + self.interpolate_pos_encoding(embeddings, height, width)
        return embeddings + self.position_embedding.weight[None]


# -- attention -----------------------------------------------------------------------------------------
class CLIPAttention(nn.Module):
    """Multi-head attention with ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj`` (all with biases)."""

    def __init__(self, config: CLIPTextConfig | CLIPVisionConfig) -> None:
        super().__init__()
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.scale = self.head_dim**-0.5
        self.dropout = float(config.attention_dropout or 0.0)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> LayerOutput:
        batch, length, _ = hidden_states.shape
        split = (batch, length, self.num_heads, self.head_dim)  # -> (batch, heads, length, head_dim)
        query = self.q_proj(hidden_states).view(split).transpose(1, 2)
        key = self.k_proj(hidden_states).view(split).transpose(1, 2)
        value = self.v_proj(hidden_states).view(split).transpose(1, 2)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if output_attentions:  # only the eager kernel can hand back the probabilities
            context, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scale, dropout=dropout, is_causal=is_causal,
                return_weights=True,
            )  # fmt: skip
        else:
            context = attention_fn(
                query, key, value, attention_mask, scaling=self.scale, dropout=dropout, is_causal=is_causal
            )
        return self.out_proj(context.transpose(1, 2).reshape(batch, length, -1)), weights


# -- MLP -----------------------------------------------------------------------------------------------
class CLIPMLP(nn.Module):
    """``fc2(act(fc1(x)))`` through ``intermediate_size`` (``hidden_act``: quick_gelu for CLIP)."""

    def __init__(self, config: CLIPTextConfig | CLIPVisionConfig) -> None:
        super().__init__()
        self.activation_fn = get_activation(config.hidden_act)
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_fn(self.fc1(hidden_states)))


# -- layer, encoder ------------------------------------------------------------------------------------
class CLIPEncoderLayer(nn.Module):
    """Pre-norm block: ``x + attn(layer_norm1(x))`` then ``x + mlp(layer_norm2(x))``."""

    def __init__(self, config: CLIPTextConfig | CLIPVisionConfig) -> None:
        super().__init__()
        self.self_attn = CLIPAttention(config)
        self.layer_norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = CLIPMLP(config)
        self.layer_norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> LayerOutput:
        attended, weights = self.self_attn(
            self.layer_norm1(hidden_states), attention_mask, is_causal, attention_fn, output_attentions
        )
        hidden_states = hidden_states + attended
        return hidden_states + self.mlp(self.layer_norm2(hidden_states)), weights


class CLIPEncoder(nn.Module):
    """``num_hidden_layers`` layers run in turn, collecting every hidden state (the input first) and attention."""

    def __init__(self, config: CLIPTextConfig | CLIPVisionConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(CLIPEncoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        call_layer: Any,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """``call_layer(layer, *args)`` runs one layer; the model passes its own so gradient checkpointing applies."""
        all_hidden_states = [hidden_states]
        all_attentions = []
        for layer in self.layers:
            hidden_states, weights = call_layer(
                layer, hidden_states, attention_mask, is_causal, attention_fn, output_attentions
            )
            all_hidden_states.append(hidden_states)
            if output_attentions:
                all_attentions.append(weights)
        return hidden_states, tuple(all_hidden_states), tuple(all_attentions)


# -- pre-trained base class ----------------------------------------------------------------------------
class CLIPPreTrainedModel(PreTrainedModel):
    """Weight init and conventions shared by the CLIP classes."""

    config_class = CLIPConfig
    base_model_prefix = "clip"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["CLIPTextEmbeddings", "CLIPEncoderLayer", "CLIPVisionEmbeddings"]

    def _init_weights(self, module: nn.Module) -> None:
        config = getattr(self.config, "vision_config", self.config)
        std = config.initializer_range * config.initializer_factor
        if isinstance(module, (nn.Linear, nn.Conv2d, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, CLIPVisionEmbeddings):
            nn.init.normal_(module.class_embedding, mean=0.0, std=module.embed_dim**-0.5 * config.initializer_factor)
        elif isinstance(module, CLIPModel):
            nn.init.constant_(module.logit_scale, self.config.logit_scale_init_value)
        else:
            super()._init_weights(module)

    def _returned(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    def _flags(self, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
        config = self.config
        attentions = config.output_attentions if output_attentions is None else output_attentions
        hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return bool(attentions), bool(hidden_states)


def _share_attention_implementation(config: CLIPConfig) -> None:
    """``attn_implementation=`` given for the two-tower model applies to both towers."""
    chosen = config._attn_implementation_internal
    if chosen is not None:
        config.text_config._attn_implementation = chosen
        config.vision_config._attn_implementation = chosen


# -- the towers ----------------------------------------------------------------------------------------
class CLIPTextModel(CLIPPreTrainedModel):
    """Token and position embeddings, causal encoder, ``final_layer_norm``; pooled at each row's first
    end-of-text token (``config.eos_token_id``; for old configs with ``eos_token_id == 2``, the highest id)."""

    config_class = CLIPTextConfig
    base_model_prefix = "text_model"
    main_input_name = "input_ids"
    config: CLIPTextConfig

    def __init__(self, config: CLIPTextConfig) -> None:
        super().__init__(config)
        self.embeddings = CLIPTextEmbeddings(config)
        self.encoder = CLIPEncoder(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.token_embedding

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.token_embedding = value

    def _pool(self, last_hidden_state: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(last_hidden_state.shape[0], device=last_hidden_state.device)
        eos = self.config.eos_token_id
        if eos == 2:  # configs written before the eos id was fixed: the end-of-text token has the highest id
            positions = input_ids.to(torch.int).argmax(dim=-1)
        else:
            positions = (input_ids.to(torch.int) == eos).int().argmax(dim=-1)
        return last_hidden_state[rows, positions.to(last_hidden_state.device)]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple[Any, ...]:
        """``input_ids`` ``(batch, length)``; ``pooler_output`` is the end-of-text token's final state."""
        if input_ids is None:
            raise CLIPInputError("the text model needs input_ids (batch, length)")
        input_ids = input_ids.view(-1, input_ids.shape[-1])
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        hidden_states = self.embeddings(input_ids=input_ids, position_ids=position_ids)
        mask, is_causal = build_attention_mask(
            attention_mask, hidden_states.shape[1], 0, causal=True, device=hidden_states.device
        )
        hidden_states, all_hidden_states, all_attentions = self.encoder(
            hidden_states, mask, is_causal, get_attention_function(self.config), output_attentions, self._call_layer
        )
        last_hidden_state = self.final_layer_norm(hidden_states)
        output = BaseModelOutputWithPooling(
            last_hidden_state=last_hidden_state,
            pooler_output=self._pool(last_hidden_state, input_ids),
            hidden_states=all_hidden_states if output_hidden_states else None,
            attentions=all_attentions if output_attentions else None,
        )
        return self._returned(output, return_dict)


class CLIPVisionModel(CLIPPreTrainedModel):
    """Embeddings, ``pre_layrnorm``, encoder; ``pooler_output`` is ``post_layernorm`` of the class token's final
    state (``last_hidden_state`` itself is not post-normalised, as in the reference)."""

    config_class = CLIPVisionConfig
    base_model_prefix = "vision_model"
    main_input_name = "pixel_values"
    config: CLIPVisionConfig

    def __init__(self, config: CLIPVisionConfig) -> None:
        super().__init__(config)
        self.embeddings = CLIPVisionEmbeddings(config)
        self.pre_layrnorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
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
        """``pixel_values`` ``(batch, channels, height, width)``; other sizes than ``config.image_size`` need
        ``interpolate_pos_encoding=True``."""
        output_attentions, output_hidden_states = self._flags(output_attentions, output_hidden_states)
        hidden_states = self.pre_layrnorm(self.embeddings(pixel_values, bool(interpolate_pos_encoding)))
        hidden_states, all_hidden_states, all_attentions = self.encoder(
            hidden_states, None, False, get_attention_function(self.config), output_attentions, self._call_layer
        )
        output = BaseModelOutputWithPooling(
            last_hidden_state=hidden_states,
            pooler_output=self.post_layernorm(hidden_states[:, 0, :]),
            hidden_states=all_hidden_states if output_hidden_states else None,
            attentions=all_attentions if output_attentions else None,
        )
        return self._returned(output, return_dict)


# -- the two-tower model -------------------------------------------------------------------------------
class CLIPModel(CLIPPreTrainedModel):
    """Both towers, ``text_projection`` / ``visual_projection`` to ``projection_dim`` and ``logit_scale``.

    ``logits_per_text[i, j]`` is the cosine similarity of text i and image j times ``exp(logit_scale)``;
    ``return_loss=True`` adds the symmetric contrastive loss (text i belongs with image i).
    """

    config: CLIPConfig
    text_model_class: ClassVar[type[PreTrainedModel]] = CLIPTextModel
    vision_model_class: ClassVar[type[PreTrainedModel]] = CLIPVisionModel

    def __init__(self, config: CLIPConfig) -> None:
        super().__init__(config)
        _share_attention_implementation(config)
        self.text_model = self.text_model_class(config.text_config)
        self.vision_model = self.vision_model_class(config.vision_config)
        self._build_heads(config)
        self.post_init()

    def _build_heads(self, config: CLIPConfig) -> None:
        self.visual_projection = nn.Linear(config.vision_config.hidden_size, config.projection_dim, bias=False)
        self.text_projection = nn.Linear(config.text_config.hidden_size, config.projection_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(float(config.logit_scale_init_value)))

    def get_input_embeddings(self) -> nn.Module:
        return self.text_model.get_input_embeddings()

    def get_text_features(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple[Any, ...]:
        """The text tower's outputs with ``pooler_output`` projected (the text embeddings, not normalised), as the
        reference returns them."""
        outputs = self.text_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        outputs.pooler_output = self._project_text(outputs.pooler_output)
        return self._returned(outputs, return_dict)

    def get_image_features(
        self,
        pixel_values: torch.Tensor | None = None,
        interpolate_pos_encoding: bool = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple[Any, ...]:
        """The vision tower's outputs with ``pooler_output`` projected (the image embeddings, not normalised)."""
        outputs = self.vision_model(
            pixel_values=pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        outputs.pooler_output = self._project_image(outputs.pooler_output)
        return self._returned(outputs, return_dict)

    def _project_text(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.text_projection(pooled)

    def _project_image(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.visual_projection(pooled)

    def _similarity(self, text_embeds: torch.Tensor, image_embeds: torch.Tensor) -> torch.Tensor:
        return text_embeds @ image_embeds.t().to(text_embeds.device) * self.logit_scale.exp().to(text_embeds.device)

    def _loss(self, logits_per_text: torch.Tensor) -> torch.Tensor:
        return contrastive_loss(logits_per_text)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        return_loss: bool | None = None,
        interpolate_pos_encoding: bool = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> CLIPOutput | tuple[Any, ...]:
        """``input_ids`` (texts) and ``pixel_values`` (images) -> similarity logits both ways and the normalised
        embeddings; ``return_loss=True`` also the loss (needs as many texts as images)."""
        if input_ids is None or pixel_values is None:
            raise CLIPInputError(
                f"{type(self).__name__} needs both input_ids and pixel_values; for one tower use get_text_features "
                "or get_image_features"
            )
        vision_outputs = self.get_image_features(
            pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        text_outputs = self.get_text_features(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        image_embeds = vision_outputs.pooler_output
        text_embeds = text_outputs.pooler_output
        image_embeds = image_embeds / image_embeds.norm(p=2, dim=-1, keepdim=True)
        text_embeds = text_embeds / text_embeds.norm(p=2, dim=-1, keepdim=True)
        logits_per_text = self._similarity(text_embeds, image_embeds)
        loss = None
        if return_loss:
            if logits_per_text.shape[0] != logits_per_text.shape[1]:
                raise CLIPInputError(
                    f"return_loss=True pairs text i with image i, but got {logits_per_text.shape[0]} texts and "
                    f"{logits_per_text.shape[1]} images; pass one image per text"
                )
            loss = self._loss(logits_per_text)
        output = CLIPOutput(
            loss=loss,
            logits_per_image=logits_per_text.t(),
            logits_per_text=logits_per_text,
            text_embeds=text_embeds,
            image_embeds=image_embeds,
            text_model_output=text_outputs,
            vision_model_output=vision_outputs,
        )
        return self._returned(output, return_dict)


# -- one tower with its projection ---------------------------------------------------------------------
class CLIPTextModelWithProjection(CLIPPreTrainedModel):
    """The text tower and ``text_projection``: ``text_embeds`` (not normalised) for each text."""

    config_class = CLIPTextConfig
    base_model_prefix = "text_model"
    main_input_name = "input_ids"
    config: CLIPTextConfig

    def __init__(self, config: CLIPTextConfig) -> None:
        super().__init__(config)
        self.text_model = CLIPTextModel(config)
        self.text_projection = nn.Linear(config.hidden_size, config.projection_dim, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.text_model.get_input_embeddings()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> CLIPTextModelOutput | tuple[Any, ...]:
        outputs = self.text_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        output = CLIPTextModelOutput(
            text_embeds=self.text_projection(outputs.pooler_output),
            last_hidden_state=outputs.last_hidden_state,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return self._returned(output, return_dict)


class CLIPVisionModelWithProjection(CLIPPreTrainedModel):
    """The vision tower and ``visual_projection``: ``image_embeds`` (not normalised) for each image."""

    config_class = CLIPVisionConfig
    base_model_prefix = "vision_model"
    main_input_name = "pixel_values"
    config: CLIPVisionConfig

    def __init__(self, config: CLIPVisionConfig) -> None:
        super().__init__(config)
        self.vision_model = CLIPVisionModel(config)
        self.visual_projection = nn.Linear(config.hidden_size, config.projection_dim, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.vision_model.get_input_embeddings()

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        interpolate_pos_encoding: bool = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> CLIPVisionModelOutput | tuple[Any, ...]:
        outputs = self.vision_model(
            pixel_values=pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        output = CLIPVisionModelOutput(
            image_embeds=self.visual_projection(outputs.pooler_output),
            last_hidden_state=outputs.last_hidden_state,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return self._returned(output, return_dict)


# -- image classification ------------------------------------------------------------------------------
class CLIPForImageClassification(CLIPPreTrainedModel):
    """The vision tower and a linear ``classifier`` on the mean of the patch tokens' final states (the class
    token left out); the loss follows ``config.problem_type``."""

    config: CLIPConfig
    main_input_name = "pixel_values"
    vision_model_class: ClassVar[type[PreTrainedModel]] = CLIPVisionModel
    # SigLIP's vision tower has no class token: every token is averaged.
    pooled_from: ClassVar[int] = 1

    def __init__(self, config: CLIPConfig) -> None:
        super().__init__(config)
        _share_attention_implementation(config)
        self.num_labels = config.num_labels
        self.vision_model = self.vision_model_class(config.vision_config)
        hidden = config.vision_config.hidden_size
        self.classifier = nn.Linear(hidden, config.num_labels) if config.num_labels > 0 else nn.Identity()
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.vision_model.get_input_embeddings()

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        interpolate_pos_encoding: bool = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> ImageClassifierOutput | tuple[Any, ...]:
        outputs = self.vision_model(
            pixel_values=pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.classifier(outputs.last_hidden_state[:, self.pooled_from :, :].mean(dim=1))
        output = ImageClassifierOutput(
            loss=sequence_classification_loss(logits, labels, self.config) if labels is not None else None,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return self._returned(output, return_dict)

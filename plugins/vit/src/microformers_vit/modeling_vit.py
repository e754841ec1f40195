"""The Vision Transformer (ViT) and its image-classification head, written out top to bottom.

Reading order: patch embeddings, embeddings ([CLS] token, positions, interpolation for other image sizes),
self-attention, attention output, MLP (intermediate + output), pre-norm layer, encoder, pooler, the pre-trained
base class, ``ViTModel``, then ``ViTForImageClassification``. The configuration is ``ViTConfig`` in
``configuration_vit.py``. From the SDK this file takes only building blocks: the attention functions
(``config._attn_implementation``: ``sdpa``, ``eager`` or a registered one), the mask helper, activations,
output dataclasses and the classification loss; every ``forward`` is here.

Parameter names equal the checkpoint tensor names of the reference implementation
(``vit.embeddings.patch_embeddings.projection.weight``, ``vit.embeddings.cls_token``,
``vit.encoder.layer.{i}.attention.attention.query.weight``, ``vit.encoder.layer.{i}.attention.output.dense.weight``,
``vit.encoder.layer.{i}.intermediate.dense.weight``, ``vit.encoder.layer.{i}.output.dense.weight``,
``vit.encoder.layer.{i}.layernorm_before.weight``, ``vit.layernorm.weight``, ``vit.pooler.dense.weight``,
``classifier.weight``), so files load and save without renaming.
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

from .configuration_vit import ViTConfig, as_pair

__all__ = [
    "ImageClassifierOutput",
    "ViTAttention",
    "ViTConfig",
    "ViTForImageClassification",
    "ViTInputError",
    "ViTModel",
    "ViTPatchEmbeddings",
    "ViTPreTrainedModel",
]

# What a layer returns: its hidden states and, with ``output_attentions``, its attention probabilities.
LayerOutput = tuple[torch.Tensor, torch.Tensor | None]


class ViTInputError(InputError):
    """The pixel values do not fit the model (channels, image size, missing input)."""


class ImageClassifierOutput(ModelOutput):
    loss: Any
    logits: Any
    hidden_states: Any
    attentions: Any


# -- embeddings ----------------------------------------------------------------------------------------
class ViTPatchEmbeddings(nn.Module):
    """``projection``: a Conv2d with kernel = stride = patch size, turning ``(B, C, H, W)`` into ``(B, patches, D)``."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.image_size = as_pair(config.image_size, "image_size")
        self.patch_size = as_pair(config.patch_size, "patch_size")
        self.num_channels = config.num_channels
        self.num_patches = (self.image_size[0] // self.patch_size[0]) * (self.image_size[1] // self.patch_size[1])
        self.projection = nn.Conv2d(
            config.num_channels, config.hidden_size, kernel_size=self.patch_size, stride=self.patch_size
        )

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if pixel_values.dim() != 4:
            raise ViTInputError(
                f"pixel_values has shape {tuple(pixel_values.shape)}; pass (batch, channels, height, width) "
                "as the image processor returns it"
            )
        channels, height, width = pixel_values.shape[1:]
        if channels != self.num_channels:
            raise ViTInputError(
                f"pixel_values has {channels} channels but the model's config says num_channels={self.num_channels}"
            )
        if height < self.patch_size[0] or width < self.patch_size[1]:
            raise ViTInputError(
                f"the image ({height}x{width}) is smaller than one patch ({self.patch_size[0]}x{self.patch_size[1]})"
            )
        return self.projection(pixel_values).flatten(2).transpose(1, 2)


class ViTEmbeddings(nn.Module):
    """[CLS] token + patch embeddings, plus learned positions (interpolated for other image sizes), dropped out.

    ``mask_token`` (``use_mask_token=True``) replaces the patches ``bool_masked_pos`` marks. Subclasses with more
    tokens before the patches (DeiT's distillation token) set ``num_prefix_tokens`` and ``prefix_tokens``.
    """

    num_prefix_tokens: ClassVar[int] = 1

    def __init__(self, config: ViTConfig, use_mask_token: bool = False) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.mask_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size)) if use_mask_token else None
        self.patch_embeddings = ViTPatchEmbeddings(config)
        self.position_embeddings = nn.Parameter(
            torch.zeros(1, self.patch_embeddings.num_patches + self.num_prefix_tokens, config.hidden_size)
        )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.patch_size = self.patch_embeddings.patch_size
        self.image_size = self.patch_embeddings.image_size

    def interpolate_pos_encoding(self, embeddings: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """The position embeddings resized (bicubic, as the reference) to a ``height x width`` image's patch grid.

        The learned grid is taken to be square (as in every released checkpoint); the [CLS] position is kept.
        """
        prefix = self.num_prefix_tokens
        num_patches = embeddings.shape[1] - prefix
        num_positions = self.position_embeddings.shape[1] - prefix
        if not torch.jit.is_tracing() and num_patches == num_positions and height == width:
            return self.position_embeddings
        class_pos = self.position_embeddings[:, :prefix]
        patch_pos = self.position_embeddings[:, prefix:]
        dim = embeddings.shape[-1]
        side = int(math.sqrt(num_positions))
        if side * side != num_positions:
            raise ViTInputError(
                f"interpolate_pos_encoding needs a square grid of learned positions; this model has {num_positions}"
            )
        grid = patch_pos.reshape(1, side, side, dim).permute(0, 3, 1, 2)
        grid = nn.functional.interpolate(
            grid,
            size=(height // self.patch_size[0], width // self.patch_size[1]),
            mode="bicubic",
            align_corners=False,
        )
        return torch.cat((class_pos, grid.permute(0, 2, 3, 1).reshape(1, -1, dim)), dim=1)

    def prefix_tokens(self, batch: int) -> torch.Tensor:
        """The tokens put before the patches: ``(batch, num_prefix_tokens, hidden)``."""
        return self.cls_token.expand(batch, -1, -1)

    def forward(
        self,
        pixel_values: torch.Tensor,
        bool_masked_pos: torch.Tensor | None = None,
        interpolate_pos_encoding: bool = False,
    ) -> torch.Tensor:
        batch, _, height, width = pixel_values.shape
        embeddings = self.patch_embeddings(pixel_values)
        if bool_masked_pos is not None:
            if self.mask_token is None:
                raise ViTInputError("bool_masked_pos needs a model built with use_mask_token=True")
            mask = bool_masked_pos.unsqueeze(-1).type_as(embeddings)
            embeddings = embeddings * (1.0 - mask) + self.mask_token.expand(batch, embeddings.shape[1], -1) * mask
        embeddings = torch.cat((self.prefix_tokens(batch), embeddings), dim=1)
        if interpolate_pos_encoding:
            embeddings = embeddings + self.interpolate_pos_encoding(embeddings, height, width)
        else:
            if (height, width) != self.image_size:
                raise ViTInputError(
                    f"the image is {height}x{width} but the model was built for {self.image_size[0]}x"
                    f"{self.image_size[1]}; resize it (the image processor does) or pass interpolate_pos_encoding=True"
                )
            embeddings = embeddings + self.position_embeddings
        return self.dropout(embeddings)


# -- attention -----------------------------------------------------------------------------------------
# ViTSelfAttention.forward is BertSelfAttention.forward (microformers-bert) without head masks, kept in sync by
# tests/integration/test_model_copies_in_sync.py.
class ViTSelfAttention(nn.Module):
    """Bidirectional multi-head attention: ``query``, ``key`` and ``value`` projections, then the attention kernel."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_probs_dropout_prob or 0.0)
        self.query = nn.Linear(config.hidden_size, config.hidden_size, bias=config.qkv_bias)
        self.key = nn.Linear(config.hidden_size, config.hidden_size, bias=config.qkv_bias)
        self.value = nn.Linear(config.hidden_size, config.hidden_size, bias=config.qkv_bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> LayerOutput:
        batch, length, _ = hidden_states.shape
        split = (batch, length, self.num_heads, self.head_dim)  # -> (batch, heads, length, head_dim)
        query = self.query(hidden_states).view(split).transpose(1, 2)
        key = self.key(hidden_states).view(split).transpose(1, 2)
        value = self.value(hidden_states).view(split).transpose(1, 2)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions:  # only the eager kernel can hand back the probabilities
            context, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, return_weights=True
            )
        else:
            context = attention_fn(query, key, value, attention_mask, scaling=self.scaling, dropout=dropout)
        return context.transpose(1, 2).reshape(batch, length, -1), weights

    def attend_rows(
        self,
        hidden_states: torch.Tensor,
        rows: int,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
    ) -> torch.Tensor:
        """The context of the first ``rows`` tokens only, attending over all of them: ``(batch, rows, hidden)``.

        What ``forward`` gives for those rows (keys and values from every token, queries from these): for a last layer
        whose other rows no head reads."""
        batch, length, _ = hidden_states.shape
        query = self.query(hidden_states[:, :rows]).view(batch, rows, self.num_heads, self.head_dim).transpose(1, 2)
        key = self.key(hidden_states).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
        value = self.value(hidden_states).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
        if attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[-2] > 1:
            attention_mask = attention_mask[..., :rows, :]
        dropout = self.attention_dropout if self.training else 0.0
        context = attention_fn(query, key, value, attention_mask, scaling=self.scaling, dropout=dropout)
        return context.transpose(1, 2).reshape(batch, rows, -1)


class ViTSelfOutput(nn.Module):
    """``dropout(dense(x))``; the residual is added by the (pre-norm) layer."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.dense(hidden_states))


class ViTAttention(nn.Module):
    """``attention`` (the heads) and ``output`` (the projection back)."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.attention = ViTSelfAttention(config)
        self.output = ViTSelfOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> LayerOutput:
        context, weights = self.attention(hidden_states, attention_mask, attention_fn, output_attentions)
        return self.output(context), weights


# -- MLP -----------------------------------------------------------------------------------------------
class ViTIntermediate(nn.Module):
    """``act(dense(x))`` up to ``intermediate_size`` (``hidden_act``, GELU for ViT)."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = get_activation(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class ViTOutput(nn.Module):
    """``dropout(dense(x)) + residual`` back down from ``intermediate_size``."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.dense(hidden_states)) + residual


# -- layer, encoder, pooler ----------------------------------------------------------------------------
class ViTLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``.

    With ``rows``, only the first ``rows`` tokens come out (their attention still reads every token): a last layer
    whose other outputs nobody reads (the classifier takes the [CLS] state) skips their query, output projection and
    MLP, about 5/6 of the layer.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.attention = ViTAttention(config)
        self.intermediate = ViTIntermediate(config)
        self.output = ViTOutput(config)
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        rows: int | None = None,
    ) -> LayerOutput:
        if rows is not None:
            normed = self.layernorm_before(hidden_states)
            context = self.attention.attention.attend_rows(normed, rows, attention_mask, attention_fn)
            hidden_states = self.attention.output(context) + hidden_states[:, :rows]
            return self.output(self.intermediate(self.layernorm_after(hidden_states)), hidden_states), None
        attended, weights = self.attention(
            self.layernorm_before(hidden_states), attention_mask, attention_fn, output_attentions
        )
        hidden_states = attended + hidden_states
        return self.output(self.intermediate(self.layernorm_after(hidden_states)), hidden_states), weights


class ViTEncoder(nn.Module):
    """``num_hidden_layers`` layers run in turn, collecting every hidden state (embeddings first) and attention."""

    layer_class: ClassVar[type[nn.Module]] = ViTLayer  # DINOv2's encoder runs its own layers

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(self.layer_class(config) for _ in range(config.num_hidden_layers))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
        call_layer: Any,
        last_layer_rows: int | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """``call_layer(layer, *args)`` runs one layer; the model passes its own so gradient checkpointing applies.
        ``last_layer_rows``: the last layer computes only the first that many tokens (:class:`ViTLayer`)."""
        all_hidden_states = [hidden_states]
        all_attentions = []
        last = len(self.layer) - 1
        for index, layer in enumerate(self.layer):
            if index == last and last_layer_rows is not None:
                hidden_states, weights = call_layer(
                    layer, hidden_states, attention_mask, attention_fn, False, last_layer_rows
                )
            else:
                hidden_states, weights = call_layer(
                    layer, hidden_states, attention_mask, attention_fn, output_attentions
                )
            all_hidden_states.append(hidden_states)
            if output_attentions:
                all_attentions.append(weights)
        return hidden_states, tuple(all_hidden_states), tuple(all_attentions)


class ViTPooler(nn.Module):
    """``act(dense(h[:, 0]))``: the [CLS] token's final state, projected to ``pooler_output_size``."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.pooler_output_size)
        self.activation = get_activation(config.pooler_act, "pooler_act")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


# -- pre-trained base class ----------------------------------------------------------------------------
class ViTPreTrainedModel(PreTrainedModel):
    """Weight init and conventions shared by ``ViTModel`` and its heads."""

    config_class = ViTConfig
    base_model_prefix = "vit"
    main_input_name = "pixel_values"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["ViTEmbeddings", "ViTLayer"]
    # Checkpoints saved without a pooler (e.g. ViTForImageClassification's) load into models that have one.
    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = [r"(^|\.)pooler\."]
    # The reference (transformers 5) names these modules differently in memory while its weight files keep the names
    # used here; peft adapters made on it carry its names. The LoRA plugin loads both namings and saves the
    # reference's. (reference path, ours), most specific first; {n} is a layer index.
    reference_module_renames: ClassVar[tuple[tuple[str, str], ...]] = (
        ("layers.{n}.attention.q_proj", "encoder.layer.{n}.attention.attention.query"),
        ("layers.{n}.attention.k_proj", "encoder.layer.{n}.attention.attention.key"),
        ("layers.{n}.attention.v_proj", "encoder.layer.{n}.attention.attention.value"),
        ("layers.{n}.attention.o_proj", "encoder.layer.{n}.attention.output.dense"),
        ("layers.{n}.mlp.fc1", "encoder.layer.{n}.intermediate.dense"),
        ("layers.{n}.mlp.fc2", "encoder.layer.{n}.output.dense"),
        ("layers.{n}", "encoder.layer.{n}"),
        ("layers", "encoder.layer"),
    )
    config: ViTConfig

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.trunc_normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, ViTEmbeddings):
            nn.init.trunc_normal_(module.position_embeddings, mean=0.0, std=std)
            nn.init.trunc_normal_(module.cls_token, mean=0.0, std=std)
            if module.mask_token is not None:
                nn.init.zeros_(module.mask_token)
        else:
            super()._init_weights(module)

    def _returned(self, output: ModelOutput, return_dict: bool | None) -> Any:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


# -- base model ----------------------------------------------------------------------------------------
class ViTModel(ViTPreTrainedModel):
    """Embeddings, encoder, final LayerNorm and (unless ``add_pooling_layer=False``) the pooler.

    Returns ``BaseModelOutputWithPooling``; ``hidden_states`` holds the embedding output and every layer's output
    (``num_hidden_layers + 1`` tensors, the last before the final LayerNorm).
    """

    embeddings_class: ClassVar[type[ViTEmbeddings]] = ViTEmbeddings

    def __init__(self, config: ViTConfig, add_pooling_layer: bool = True, use_mask_token: bool = False) -> None:
        super().__init__(config)
        self.embeddings = self.embeddings_class(config, use_mask_token=use_mask_token)
        self.encoder = ViTEncoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.pooler = ViTPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.patch_embeddings

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        bool_masked_pos: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        _last_layer_rows: int | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPooling | tuple[Any, ...]:
        """``pixel_values`` ``(batch, channels, height, width)`` as the image processor returns them; other image
        sizes than ``config.image_size`` need ``interpolate_pos_encoding=True``.

        ``_last_layer_rows`` (for this plugin's heads, which read only the first tokens' final states): the last layer
        computes only the first that many tokens, and ``last_hidden_state`` holds only them. Ignored when hidden
        states or attentions are asked for."""
        if pixel_values is None:
            raise ViTInputError("ViTModel needs pixel_values (batch, channels, height, width)")
        config = self.config
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        weight = self.embeddings.patch_embeddings.projection.weight
        if pixel_values.dtype != weight.dtype:
            pixel_values = pixel_values.to(weight.dtype)

        hidden_states = self.embeddings(pixel_values, bool_masked_pos, bool(interpolate_pos_encoding))
        mask, _ = build_attention_mask(
            attention_mask, hidden_states.shape[1], 0, causal=False, device=hidden_states.device
        )
        rows = None if output_attentions or output_hidden_states else _last_layer_rows
        hidden_states, all_hidden_states, all_attentions = self.encoder(
            hidden_states, mask, get_attention_function(config), output_attentions, self._call_layer, rows
        )
        sequence_output = self.layernorm(hidden_states)
        output = BaseModelOutputWithPooling(
            last_hidden_state=sequence_output,
            pooler_output=self.pooler(sequence_output) if self.pooler is not None else None,
            hidden_states=all_hidden_states if output_hidden_states else None,
            attentions=all_attentions if output_attentions else None,
        )
        return self._returned(output, return_dict)


# -- heads ---------------------------------------------------------------------------------------------
class ViTForImageClassification(ViTPreTrainedModel):
    """A linear classifier on the final [CLS] state (no pooler); the loss follows ``config.problem_type``."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit = ViTModel(config, add_pooling_layer=False)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.base_model.get_input_embeddings()

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> ImageClassifierOutput | tuple[Any, ...]:
        outputs = self.base_model(  # self.vit (DeiT's subclass: self.deit)
            pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            attention_mask=attention_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            _last_layer_rows=1,  # the classifier reads the final [CLS] state only
        )
        logits = self.classifier(outputs.last_hidden_state[:, 0, :])
        output = ImageClassifierOutput(
            loss=sequence_classification_loss(logits, labels, self.config) if labels is not None else None,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return self._returned(output, return_dict)

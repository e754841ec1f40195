"""Wav2Vec2: raw audio -> convolutional features -> transformer encoder, with CTC and classification heads.

Parameter names equal the reference implementation's checkpoint names
(``wav2vec2.feature_extractor.conv_layers.{i}.conv.weight``, ``...layer_norm``,
``wav2vec2.feature_projection.{layer_norm,projection}``, ``wav2vec2.masked_spec_embed``,
``wav2vec2.encoder.pos_conv_embed.conv.parametrizations.weight.original{0,1}`` (weight norm; the older
``weight_g``/``weight_v`` names are renamed on load), ``wav2vec2.encoder.layers.{i}.attention.{q,k,v,out}_proj``,
``...feed_forward.{intermediate,output}_dense``, ``lm_head``, ``projector``, ``classifier``), so files
load and save both ways without conversion.

The forward pass, top to bottom:

1. Feature encoder: ``len(conv_dim)`` 1-D convolutions over the waveform, each followed by GELU. With
   ``feat_extract_norm="group"`` only the first has a (per-channel) GroupNorm; with ``"layer"`` every
   one has a LayerNorm over channels.
2. Feature projection: LayerNorm, Linear to ``hidden_size``, dropout. In training, SpecAugment replaces
   random time spans with ``masked_spec_embed`` (and zeroes random feature spans).
3. Encoder: padded frames are zeroed, a grouped convolution with weight norm adds relative positions,
   then ``num_hidden_layers`` layers. ``do_stable_layer_norm=False``: post-norm layers after a LayerNorm
   of the embeddings; ``True``: pre-norm layers and a final LayerNorm. LayerDrop skips layers in training.
4. Heads: ``Wav2Vec2ForCTC`` (Linear to the vocabulary, CTC loss with the pad token as blank) and
   ``Wav2Vec2ForSequenceClassification`` (projection, mean over real frames, Linear to the labels).
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
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import CausalLMOutput, SequenceClassifierOutput
from microformers_sdk.weights import KeyRenamer

from .configuration_wav2vec2 import Wav2Vec2Config

__all__ = [
    "Wav2Vec2Attention",
    "Wav2Vec2BaseModelOutput",
    "Wav2Vec2Config",
    "Wav2Vec2ForCTC",
    "Wav2Vec2ForSequenceClassification",
    "Wav2Vec2InputError",
    "Wav2Vec2Model",
    "Wav2Vec2PreTrainedModel",
]

# Checkpoints saved with torch's legacy weight_norm name the two halves weight_g / weight_v.
LEGACY_NAMES = KeyRenamer(
    [
        (r"pos_conv_embed\.conv\.weight_g$", "pos_conv_embed.conv.parametrizations.weight.original0"),
        (r"pos_conv_embed\.conv\.weight_v$", "pos_conv_embed.conv.parametrizations.weight.original1"),
    ]
)


class Wav2Vec2InputError(InputError):
    """The arguments of a forward call do not fit the model (wrong shapes, audio too short, bad labels)."""


class Wav2Vec2BaseModelOutput(ModelOutput):
    last_hidden_state: Any
    extract_features: Any
    hidden_states: Any
    attentions: Any


# -- feature encoder ---------------------------------------------------------------------------------
class Wav2Vec2ConvLayer(nn.Module):
    """Conv1d -> optional norm ("group": GroupNorm with one group per channel; "layer": LayerNorm) -> activation."""

    def __init__(self, config: Wav2Vec2Config, layer_id: int, norm: str | None) -> None:
        super().__init__()
        in_dim = config.conv_dim[layer_id - 1] if layer_id > 0 else 1
        out_dim = config.conv_dim[layer_id]
        self.conv = nn.Conv1d(
            in_dim,
            out_dim,
            kernel_size=config.conv_kernel[layer_id],
            stride=config.conv_stride[layer_id],
            bias=config.conv_bias,
        )
        self.norm = norm
        if norm == "group":
            self.layer_norm = nn.GroupNorm(num_groups=out_dim, num_channels=out_dim, affine=True)
        elif norm == "layer":
            self.layer_norm = nn.LayerNorm(out_dim, elementwise_affine=True)
        self.activation = get_activation(config.feat_extract_activation, "feat_extract_activation")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.conv(hidden_states)
        if self.norm == "group":
            hidden_states = self.layer_norm(hidden_states)
        elif self.norm == "layer":
            hidden_states = self.layer_norm(hidden_states.transpose(-2, -1)).transpose(-2, -1)
        return self.activation(hidden_states)


class Wav2Vec2FeatureEncoder(nn.Module):
    """The stack of convolutions that turns ``(batch, samples)`` into ``(batch, conv_dim[-1], frames)``."""

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        if config.feat_extract_norm == "group":
            norms = ["group"] + [None] * (config.num_feat_extract_layers - 1)
        else:
            norms = ["layer"] * config.num_feat_extract_layers
        self.conv_layers = nn.ModuleList(Wav2Vec2ConvLayer(config, i, norm) for i, norm in enumerate(norms))
        self._requires_grad = True

    def _freeze_parameters(self) -> None:
        for param in self.parameters():
            param.requires_grad = False
        self._requires_grad = False

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        hidden_states = input_values[:, None]
        for conv_layer in self.conv_layers:
            hidden_states = conv_layer(hidden_states)
        return hidden_states


class Wav2Vec2FeatureProjection(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.conv_dim[-1], eps=config.layer_norm_eps)
        self.projection = nn.Linear(config.conv_dim[-1], config.hidden_size)
        self.dropout = nn.Dropout(config.feat_proj_dropout)

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        normed = self.layer_norm(hidden_states)
        return self.dropout(self.projection(normed)), normed


# -- encoder -----------------------------------------------------------------------------------------
class Wav2Vec2PositionalConvEmbedding(nn.Module):
    """Grouped convolution (weight-normalised over the kernel axis) over time; drops one frame for even kernels."""

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        conv = nn.Conv1d(
            config.hidden_size,
            config.hidden_size,
            kernel_size=config.num_conv_pos_embeddings,
            padding=config.num_conv_pos_embeddings // 2,
            groups=config.num_conv_pos_embedding_groups,
        )
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        self.num_pad_remove = 1 if config.num_conv_pos_embeddings % 2 == 0 else 0
        self.activation = get_activation(config.feat_extract_activation, "feat_extract_activation")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.conv(hidden_states.transpose(1, 2))
        if self.num_pad_remove:
            hidden_states = hidden_states[:, :, : -self.num_pad_remove]
        return self.activation(hidden_states).transpose(1, 2)


class Wav2Vec2Attention(nn.Module):
    """Bidirectional multi-head attention: ``q_proj``, ``k_proj``, ``v_proj`` in, the attention kernel, ``out_proj`` out."""

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape
        split = (batch, length, self.num_heads, self.head_dim)  # -> (batch, heads, length, head_dim)
        query = self.q_proj(hidden_states).view(split).transpose(1, 2)
        key = self.k_proj(hidden_states).view(split).transpose(1, 2)
        value = self.v_proj(hidden_states).view(split).transpose(1, 2)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions:  # only the eager kernel can hand back the probabilities
            context, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, return_weights=True
            )
        else:
            context = attention_fn(query, key, value, attention_mask, scaling=self.scaling, dropout=dropout)
        return self.out_proj(context.transpose(1, 2).reshape(batch, length, -1)), weights


class Wav2Vec2FeedForward(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.intermediate_dropout = nn.Dropout(config.activation_dropout)
        self.intermediate_dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = get_activation(config.hidden_act)
        self.output_dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.intermediate_dropout(self.intermediate_act_fn(self.intermediate_dense(hidden_states)))
        return self.output_dropout(self.output_dense(hidden_states))


class Wav2Vec2EncoderLayer(nn.Module):
    """Post-norm (``stable=False``: norm after each residual) or pre-norm (``stable=True``) transformer layer."""

    def __init__(self, config: Wav2Vec2Config, stable: bool) -> None:
        super().__init__()
        self.stable = stable
        self.attention = Wav2Vec2Attention(config)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = Wav2Vec2FeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_fn: AttentionFunction,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        residual = hidden_states
        if self.stable:
            hidden_states = self.layer_norm(hidden_states)
        hidden_states, weights = self.attention(hidden_states, attention_mask, attention_fn, output_attentions)
        hidden_states = residual + self.dropout(hidden_states)
        if self.stable:
            return hidden_states + self.feed_forward(self.final_layer_norm(hidden_states)), weights
        hidden_states = self.layer_norm(hidden_states)
        return self.final_layer_norm(hidden_states + self.feed_forward(hidden_states)), weights


class Wav2Vec2Encoder(nn.Module):
    """Positional convolution, then the layers; ``stable`` selects pre-norm layers and a final LayerNorm."""

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.config = config
        self.stable = bool(config.do_stable_layer_norm)
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding(config)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.layers = nn.ModuleList(Wav2Vec2EncoderLayer(config, self.stable) for _ in range(config.num_hidden_layers))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        mask = None
        if attention_mask is not None:
            hidden_states = hidden_states.masked_fill(~attention_mask.bool()[..., None], 0.0)
            mask, _ = build_attention_mask(attention_mask, hidden_states.shape[1], 0, causal=False)
        hidden_states = hidden_states + self.pos_conv_embed(hidden_states)
        if not self.stable:
            hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.dropout(hidden_states)
        attention_fn = get_attention_function(self.config)
        all_hidden: list[torch.Tensor] = []
        all_weights: list[torch.Tensor] = []
        for layer in self.layers:
            if output_hidden_states:
                all_hidden.append(hidden_states)
            if self.training and self.config.layerdrop > 0.0 and bool(torch.rand([]) < self.config.layerdrop):
                continue
            hidden_states, weights = layer(hidden_states, mask, attention_fn, output_attentions)
            if weights is not None:
                all_weights.append(weights)
        if output_hidden_states:  # the last layer's output (before the final norm of stable layer norm)
            all_hidden.append(hidden_states)
        if self.stable:
            hidden_states = self.layer_norm(hidden_states)
        return (
            hidden_states,
            tuple(all_hidden) if output_hidden_states else None,
            tuple(all_weights) if output_attentions else None,
        )


# -- SpecAugment -------------------------------------------------------------------------------------
def compute_mask_indices(
    shape: tuple[int, int],
    mask_prob: float,
    mask_length: int,
    attention_mask: torch.Tensor | None = None,
    min_masks: int = 0,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Random spans of ``mask_length`` covering about ``mask_prob`` of each row's real length (SpecAugment)."""
    batch, length = shape
    if mask_length < 1:
        raise Wav2Vec2InputError(f"mask_length={mask_length} must be at least 1")
    if mask_length > length:
        raise Wav2Vec2InputError(
            f"mask_length={mask_length} is longer than the {length} frames of the input; use longer audio or a "
            "smaller mask_time_length / mask_feature_length"
        )
    lengths = attention_mask.sum(-1).tolist() if attention_mask is not None else [length] * batch
    mask = torch.zeros(shape, dtype=torch.bool)
    for row, row_length in enumerate(int(n) for n in lengths):
        spans = int(mask_prob * row_length / mask_length + float(torch.rand([])))
        spans = max(spans, min_masks)
        spans = min(spans, row_length // mask_length)
        if spans <= 0 or row_length - mask_length + 1 <= 0:
            continue
        starts = torch.randperm(row_length - mask_length + 1)[:spans]
        positions = (starts[:, None] + torch.arange(mask_length)[None, :]).flatten()
        mask[row, positions] = True
    return mask.to(device) if device is not None else mask


# -- models ------------------------------------------------------------------------------------------
class Wav2Vec2PreTrainedModel(PreTrainedModel):
    config_class = Wav2Vec2Config
    base_model_prefix = "wav2vec2"
    main_input_name = "input_values"

    def _checkpoint_key_map(self, checkpoint_keys: set[str]) -> dict[str, str]:
        mapping = super()._checkpoint_key_map(checkpoint_keys)
        own = self.state_dict(keep_vars=True).keys()
        renamed = LEGACY_NAMES.rename_all(checkpoint_keys)
        prefix = self.base_model_prefix + "."
        for name in own:
            if name in mapping:
                continue
            for candidate in (name, name.removeprefix(prefix), prefix + name):
                if candidate in renamed:
                    mapping[name] = renamed[candidate]
                    break
        return mapping

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, Wav2Vec2PositionalConvEmbedding):
            std = 2 * math.sqrt(1 / (module.conv.kernel_size[0] * module.conv.in_channels))
            with torch.no_grad():
                weight = torch.empty_like(module.conv.weight)
                nn.init.normal_(weight, mean=0, std=std)
                module.conv.parametrizations.weight.original1.copy_(weight)
                module.conv.parametrizations.weight.original0.copy_(
                    torch.linalg.vector_norm(weight, dim=(0, 1), keepdim=True)
                )
            nn.init.constant_(module.conv.bias, 0)
        elif isinstance(module, Wav2Vec2FeatureProjection):
            bound = math.sqrt(1 / module.projection.in_features)
            nn.init.uniform_(module.projection.weight, a=-bound, b=bound)
            nn.init.uniform_(module.projection.bias, a=-bound, b=bound)
        elif isinstance(module, nn.Conv1d) and not hasattr(module, "parametrizations"):
            nn.init.kaiming_normal_(module.weight)
            if module.bias is not None:
                bound = math.sqrt(module.groups / (module.in_channels * module.kernel_size[0]))
                nn.init.uniform_(module.bias, a=-bound, b=bound)
        elif isinstance(module, nn.GroupNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, Wav2Vec2Model) and getattr(module, "masked_spec_embed", None) is not None:
            nn.init.uniform_(module.masked_spec_embed)
        elif isinstance(module, (nn.Linear, nn.LayerNorm)):
            super()._init_weights(module)

    def _get_feat_extract_output_lengths(self, input_lengths: torch.Tensor | int) -> torch.Tensor | int:
        """Output frames of the feature encoder for ``input_lengths`` samples."""
        for kernel, stride in zip(self.config.conv_kernel, self.config.conv_stride):
            if isinstance(input_lengths, torch.Tensor):
                input_lengths = torch.div(input_lengths - kernel, stride, rounding_mode="floor") + 1
            else:
                input_lengths = (input_lengths - kernel) // stride + 1
        return input_lengths

    def _get_feature_vector_attention_mask(self, frames: int, attention_mask: torch.Tensor) -> torch.Tensor:
        """Frame-level mask: the first ``output_length(real samples)`` frames of each row are real."""
        lengths = self._get_feat_extract_output_lengths(attention_mask.sum(-1)).to(torch.long)
        return torch.arange(frames, device=attention_mask.device)[None, :] < lengths[:, None]

    def freeze_feature_encoder(self) -> None:
        """Stop gradients to the convolutional feature encoder (the guide's fine-tuning setup)."""
        self.base_model.feature_extractor._freeze_parameters()

    def freeze_base_model(self) -> None:
        """Stop gradients to everything but the head."""
        for param in self.base_model.parameters():
            param.requires_grad = False


def _check_input_values(model: nn.Module, input_values: Any, attention_mask: Any) -> None:
    if not isinstance(input_values, torch.Tensor) or input_values.dim() != 2:
        shape = tuple(input_values.shape) if isinstance(input_values, torch.Tensor) else type(input_values).__name__
        raise Wav2Vec2InputError(
            f"{type(model).__name__} takes input_values of shape (batch, samples), got {shape}; use the processor "
            "(processor(audio, sampling_rate=16000, return_tensors='pt')) to prepare mono audio"
        )
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_values.shape):
        raise Wav2Vec2InputError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_values has "
            f"{tuple(input_values.shape)}; pass one mask value per sample"
        )
    config = model.config
    minimum = 1
    for kernel, stride in reversed(list(zip(config.conv_kernel, config.conv_stride))):
        minimum = (minimum - 1) * stride + kernel
    if input_values.shape[1] < minimum:
        raise Wav2Vec2InputError(
            f"the audio has {input_values.shape[1]} samples; this model needs at least {minimum} "
            f"(one output frame, {minimum / 16000 * 1000:.0f} ms at 16 kHz)"
        )


class Wav2Vec2Model(Wav2Vec2PreTrainedModel):
    """The bare encoder: ``last_hidden_state`` ``(batch, frames, hidden_size)`` and ``extract_features``."""

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__(config)
        self.feature_extractor = Wav2Vec2FeatureEncoder(config)
        self.feature_projection = Wav2Vec2FeatureProjection(config)
        if config.mask_time_prob > 0.0 or config.mask_feature_prob > 0.0:
            self.masked_spec_embed = nn.Parameter(torch.empty(config.hidden_size).uniform_())
        else:
            self.masked_spec_embed = None
        self.encoder = Wav2Vec2Encoder(config)
        self.post_init()

    def _mask_hidden_states(
        self,
        hidden_states: torch.Tensor,
        mask_time_indices: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        config = self.config
        if not getattr(config, "apply_spec_augment", True):
            return hidden_states
        batch, frames, hidden = hidden_states.shape
        if mask_time_indices is None and config.mask_time_prob > 0 and self.training:
            mask_time_indices = compute_mask_indices(
                (batch, frames),
                config.mask_time_prob,
                config.mask_time_length,
                attention_mask,
                config.mask_time_min_masks,
                hidden_states.device,
            )
        if mask_time_indices is not None:
            if self.masked_spec_embed is None:
                raise Wav2Vec2InputError("mask_time_indices needs masked_spec_embed (config.mask_time_prob > 0)")
            hidden_states = torch.where(
                mask_time_indices.bool()[..., None], self.masked_spec_embed.to(hidden_states.dtype), hidden_states
            )
        if config.mask_feature_prob > 0 and self.training:
            feature_mask = compute_mask_indices(
                (batch, hidden),
                config.mask_feature_prob,
                config.mask_feature_length,
                None,
                config.mask_feature_min_masks,
                hidden_states.device,
            )
            hidden_states = hidden_states.masked_fill(feature_mask[:, None, :], 0.0)
        return hidden_states

    def forward(
        self,
        input_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        mask_time_indices: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> Any:
        _check_input_values(self, input_values, attention_mask)
        config = self.config
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        weight_dtype = self.feature_extractor.conv_layers[0].conv.weight.dtype
        if input_values.is_floating_point() and input_values.dtype != weight_dtype:
            input_values = input_values.to(weight_dtype)  # float32 audio into a half-precision model
        if self.feature_extractor._requires_grad and self.training:
            input_values = input_values.requires_grad_(True) if input_values.is_leaf else input_values
        features = self.feature_extractor(input_values).transpose(1, 2)
        frame_mask = None
        if attention_mask is not None:
            frame_mask = self._get_feature_vector_attention_mask(features.shape[1], attention_mask)
        hidden_states, features = self.feature_projection(features)
        hidden_states = self._mask_hidden_states(hidden_states, mask_time_indices, frame_mask)
        hidden_states, all_hidden, all_weights = self.encoder(
            hidden_states, frame_mask, bool(output_attentions), bool(output_hidden_states)
        )
        output = Wav2Vec2BaseModelOutput(
            last_hidden_state=hidden_states, extract_features=features, hidden_states=all_hidden, attentions=all_weights
        )
        return output if (config.return_dict if return_dict is None else return_dict) else output.to_tuple()


class Wav2Vec2ForCTC(Wav2Vec2PreTrainedModel):
    """Wav2Vec2 with a linear head over the character vocabulary, trained with CTC (blank = ``pad_token_id``)."""

    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"^quantizer\.", r"^project_(hid|q)\."]

    def __init__(self, config: Wav2Vec2Config, target_lang: str | None = None) -> None:
        super().__init__(config)
        if target_lang is not None:
            raise InputError("target_lang needs attention adapters (adapter_attn_dim), which are not supported")
        if config.vocab_size is None:
            raise InputError(
                "Wav2Vec2ForCTC needs config.vocab_size (the size of the character vocabulary); pass "
                "vocab_size=len(tokenizer) to from_pretrained or the config"
            )
        self.wav2vec2 = Wav2Vec2Model(config)
        self.dropout = nn.Dropout(config.final_dropout)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(
        self,
        input_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        mask_time_indices: torch.Tensor | None = None,
    ) -> Any:
        config = self.config
        if labels is not None and labels.numel() and int(labels.max()) >= config.vocab_size:
            raise Wav2Vec2InputError(
                f"labels contain id {int(labels.max())} but the vocabulary has {config.vocab_size} entries; "
                "encode labels with this model's tokenizer (padding becomes -100)"
            )
        outputs = self.wav2vec2(
            input_values, attention_mask, mask_time_indices, output_attentions, output_hidden_states, return_dict=True
        )
        logits = self.lm_head(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            if attention_mask is None:
                attention_mask = torch.ones_like(input_values, dtype=torch.long)
            frames = self._get_feat_extract_output_lengths(attention_mask.sum(-1)).to(torch.long)
            loss = ctc_loss(
                logits, labels, frames, config.pad_token_id, config.ctc_loss_reduction, config.ctc_zero_infinity
            )
        output = CausalLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output if (config.return_dict if return_dict is None else return_dict) else output.to_tuple()


def ctc_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    logit_lengths: torch.Tensor,
    blank_id: int,
    reduction: str = "mean",
    zero_infinity: bool = False,
    ignore_index: int = -100,
) -> torch.Tensor:
    """CTC loss in float32; label positions equal to ``ignore_index`` or the blank are padding."""
    labels = labels.to(logits.device)
    keep = (labels != ignore_index) & (labels != blank_id)
    log_probs = nn.functional.log_softmax(logits, dim=-1, dtype=torch.float32).transpose(0, 1)
    with torch.backends.cudnn.flags(enabled=False):
        return nn.functional.ctc_loss(
            log_probs,
            labels.masked_select(keep),
            logit_lengths,
            keep.sum(-1),
            blank=blank_id,
            reduction=reduction,
            zero_infinity=zero_infinity,
        )


class Wav2Vec2ForSequenceClassification(Wav2Vec2PreTrainedModel):
    """Utterance classification (keyword spotting, speaker/emotion ids): mean-pooled projected frames -> labels."""

    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"^lm_head\.", r"^quantizer\.", r"^project_(hid|q)\."]

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__(config)
        self.wav2vec2 = Wav2Vec2Model(config)
        if config.use_weighted_layer_sum:
            layers = config.num_hidden_layers + 1
            self.layer_weights = nn.Parameter(torch.ones(layers) / layers)
        self.projector = nn.Linear(config.hidden_size, config.classifier_proj_size)
        self.classifier = nn.Linear(config.classifier_proj_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> Any:
        config = self.config
        weighted = config.use_weighted_layer_sum
        outputs = self.wav2vec2(
            input_values,
            attention_mask,
            None,
            output_attentions,
            True if weighted else output_hidden_states,
            return_dict=True,
        )
        if weighted:
            stacked = torch.stack(outputs.hidden_states, dim=1)
            weights = nn.functional.softmax(self.layer_weights, dim=-1)
            hidden_states = (stacked * weights.view(-1, 1, 1)).sum(dim=1)
        else:
            hidden_states = outputs.last_hidden_state
        hidden_states = self.projector(hidden_states)
        if attention_mask is None:
            pooled = hidden_states.mean(dim=1)
        else:
            frame_mask = self._get_feature_vector_attention_mask(hidden_states.shape[1], attention_mask)
            hidden_states = hidden_states.masked_fill(~frame_mask[..., None], 0.0)
            pooled = hidden_states.sum(dim=1) / frame_mask.sum(dim=1).view(-1, 1)
        logits = self.classifier(pooled)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.view(-1, config.num_labels), labels.view(-1))
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output if (config.return_dict if return_dict is None else return_dict) else output.to_tuple()

"""``Wav2Vec2Config``: the ``config.json`` of ``model_type: wav2vec2`` checkpoints.

Imports no torch, so ``AutoConfig`` stays cheap. Every field of the reference's config is accepted with
the same default and written back on save; settings this plugin cannot run (the convolutional adapter,
attention adapters) are rejected here with a ``ConfigError`` naming the setting.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError

FEAT_EXTRACT_NORMS = ("group", "layer")
CTC_REDUCTIONS = ("sum", "mean", "none")


class Wav2Vec2Config(PretrainedConfig):
    """Convolutional feature encoder over raw audio, then a transformer encoder with convolutional positions."""

    model_type = "wav2vec2"

    def __init__(
        self,
        vocab_size: int | None = 32,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout: float = 0.1,
        activation_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        feat_proj_dropout: float = 0.0,
        feat_quantizer_dropout: float = 0.0,
        final_dropout: float = 0.1,
        layerdrop: float = 0.1,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-5,
        feat_extract_norm: str = "group",
        feat_extract_activation: str = "gelu",
        conv_dim: list[int] | tuple[int, ...] = (512, 512, 512, 512, 512, 512, 512),
        conv_stride: list[int] | tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2),
        conv_kernel: list[int] | tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2),
        conv_bias: bool = False,
        num_conv_pos_embeddings: int = 128,
        num_conv_pos_embedding_groups: int = 16,
        do_stable_layer_norm: bool = False,
        apply_spec_augment: bool = True,
        mask_time_prob: float = 0.05,
        mask_time_length: int = 10,
        mask_time_min_masks: int = 2,
        mask_feature_prob: float = 0.0,
        mask_feature_length: int = 10,
        mask_feature_min_masks: int = 0,
        num_codevectors_per_group: int = 320,
        num_codevector_groups: int = 2,
        contrastive_logits_temperature: float = 0.1,
        num_negatives: int = 100,
        codevector_dim: int = 256,
        proj_codevector_dim: int = 256,
        diversity_loss_weight: float = 0.1,
        ctc_loss_reduction: str = "sum",
        ctc_zero_infinity: bool = False,
        use_weighted_layer_sum: bool = False,
        classifier_proj_size: int = 256,
        tdnn_dim: list[int] | tuple[int, ...] = (512, 512, 512, 512, 1500),
        tdnn_kernel: list[int] | tuple[int, ...] = (5, 3, 3, 1, 1),
        tdnn_dilation: list[int] | tuple[int, ...] = (1, 2, 3, 1, 1),
        xvector_output_dim: int = 512,
        pad_token_id: int | None = 0,
        bos_token_id: int | None = 1,
        eos_token_id: int | None = 2,
        add_adapter: bool = False,
        adapter_kernel_size: int = 3,
        adapter_stride: int = 2,
        num_adapter_layers: int = 3,
        output_hidden_size: int | None = None,
        adapter_attn_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("num_feat_extract_layers", None)  # derived from conv_dim
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout = hidden_dropout
        self.activation_dropout = activation_dropout
        self.attention_dropout = attention_dropout
        self.feat_proj_dropout = feat_proj_dropout
        self.feat_quantizer_dropout = feat_quantizer_dropout
        self.final_dropout = final_dropout
        self.layerdrop = layerdrop
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.feat_extract_norm = feat_extract_norm
        self.feat_extract_activation = feat_extract_activation
        self.conv_dim = list(conv_dim)
        self.conv_stride = list(conv_stride)
        self.conv_kernel = list(conv_kernel)
        self.conv_bias = conv_bias
        self.num_conv_pos_embeddings = num_conv_pos_embeddings
        self.num_conv_pos_embedding_groups = num_conv_pos_embedding_groups
        self.do_stable_layer_norm = do_stable_layer_norm
        self.apply_spec_augment = apply_spec_augment
        self.mask_time_prob = mask_time_prob
        self.mask_time_length = mask_time_length
        self.mask_time_min_masks = mask_time_min_masks
        self.mask_feature_prob = mask_feature_prob
        self.mask_feature_length = mask_feature_length
        self.mask_feature_min_masks = mask_feature_min_masks
        self.num_codevectors_per_group = num_codevectors_per_group
        self.num_codevector_groups = num_codevector_groups
        self.contrastive_logits_temperature = contrastive_logits_temperature
        self.num_negatives = num_negatives
        self.codevector_dim = codevector_dim
        self.proj_codevector_dim = proj_codevector_dim
        self.diversity_loss_weight = diversity_loss_weight
        self.ctc_loss_reduction = ctc_loss_reduction
        self.ctc_zero_infinity = ctc_zero_infinity
        self.use_weighted_layer_sum = use_weighted_layer_sum
        self.classifier_proj_size = classifier_proj_size
        self.tdnn_dim = list(tdnn_dim)
        self.tdnn_kernel = list(tdnn_kernel)
        self.tdnn_dilation = list(tdnn_dilation)
        self.xvector_output_dim = xvector_output_dim
        self.add_adapter = add_adapter
        self.adapter_kernel_size = adapter_kernel_size
        self.adapter_stride = adapter_stride
        self.num_adapter_layers = num_adapter_layers
        self.output_hidden_size = output_hidden_size or hidden_size
        self.adapter_attn_dim = adapter_attn_dim
        self.num_feat_extract_layers = len(self.conv_dim)
        self._validate()
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)

    def _validate(self) -> None:
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name}={value!r} in Wav2Vec2Config must be a positive integer; fix config.json")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size={self.hidden_size} is not a multiple of num_attention_heads={self.num_attention_heads} "
                "in Wav2Vec2Config; fix config.json"
            )
        if not (len(self.conv_dim) == len(self.conv_stride) == len(self.conv_kernel)) or not self.conv_dim:
            raise ConfigError(
                f"conv_dim ({len(self.conv_dim)}), conv_stride ({len(self.conv_stride)}) and conv_kernel "
                f"({len(self.conv_kernel)}) in Wav2Vec2Config must list one value per convolutional layer"
            )
        if self.feat_extract_norm not in FEAT_EXTRACT_NORMS:
            raise ConfigError(
                f"feat_extract_norm={self.feat_extract_norm!r} in Wav2Vec2Config: use one of {FEAT_EXTRACT_NORMS}"
            )
        if self.ctc_loss_reduction not in CTC_REDUCTIONS:
            raise ConfigError(f"ctc_loss_reduction={self.ctc_loss_reduction!r}: use one of {CTC_REDUCTIONS}")
        if self.hidden_size % self.num_conv_pos_embedding_groups:
            raise ConfigError(
                f"hidden_size={self.hidden_size} must be a multiple of num_conv_pos_embedding_groups="
                f"{self.num_conv_pos_embedding_groups}"
            )
        if self.add_adapter:
            raise ConfigError("add_adapter=True (the convolutional adapter) is not supported by microformers-wav2vec2")
        if self.adapter_attn_dim is not None:
            raise ConfigError(
                "adapter_attn_dim (per-language attention adapters, MMS) is not supported by microformers-wav2vec2"
            )

    @property
    def inputs_to_logits_ratio(self) -> int:
        """Audio samples per output frame (the product of the convolution strides)."""
        return functools.reduce(operator.mul, self.conv_stride, 1)

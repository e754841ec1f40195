"""``WhisperConfig``: the ``config.json`` of ``model_type: whisper`` checkpoints. Imports no torch."""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers_sdk.config_checks import check_heads_divide, check_positive_ints


class WhisperConfig(PretrainedConfig):
    """Encoder over log-mel frames (two convolutions, sinusoidal positions), pre-norm text decoder."""

    model_type = "whisper"
    attribute_map: ClassVar[dict[str, str]] = {
        "num_key_value_heads": "encoder_attention_heads",
        "num_attention_heads": "encoder_attention_heads",
        "hidden_size": "d_model",
        "num_hidden_layers": "encoder_layers",
        "initializer_range": "init_std",
    }

    def __init__(
        self,
        vocab_size: int = 51865,
        num_mel_bins: int = 80,
        encoder_layers: int = 4,
        encoder_attention_heads: int = 6,
        decoder_layers: int = 4,
        decoder_attention_heads: int = 6,
        decoder_ffn_dim: int = 1536,
        encoder_ffn_dim: int = 1536,
        encoder_layerdrop: float = 0.0,
        decoder_layerdrop: float = 0.0,
        decoder_start_token_id: int = 50257,
        use_cache: bool = True,
        is_encoder_decoder: bool = True,
        activation_function: str = "gelu",
        d_model: int = 384,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        init_std: float = 0.02,
        scale_embedding: bool = False,
        max_source_positions: int = 1500,
        max_target_positions: int = 448,
        pad_token_id: int | None = 50256,
        bos_token_id: int | None = 50256,
        eos_token_id: int | list[int] | None = 50256,
        suppress_tokens: list[int] | None = None,
        begin_suppress_tokens: list[int] | None = (220, 50256),  # type: ignore[assignment]
        use_weighted_layer_sum: bool = False,
        classifier_proj_size: int = 256,
        apply_spec_augment: bool = False,
        mask_time_prob: float = 0.05,
        mask_time_length: int = 10,
        mask_time_min_masks: int = 2,
        mask_feature_prob: float = 0.0,
        mask_feature_length: int = 10,
        mask_feature_min_masks: int = 0,
        median_filter_width: int = 7,
        tie_word_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.num_mel_bins = num_mel_bins
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_layers = decoder_layers
        self.decoder_attention_heads = decoder_attention_heads
        self.decoder_ffn_dim = decoder_ffn_dim
        self.encoder_ffn_dim = encoder_ffn_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.activation_function = activation_function
        self.init_std = init_std
        self.encoder_layerdrop = encoder_layerdrop
        self.decoder_layerdrop = decoder_layerdrop
        self.use_cache = use_cache
        self.scale_embedding = scale_embedding
        self.max_source_positions = max_source_positions
        self.max_target_positions = max_target_positions
        self.classifier_proj_size = classifier_proj_size
        self.use_weighted_layer_sum = use_weighted_layer_sum
        self.apply_spec_augment = apply_spec_augment
        self.mask_time_prob = mask_time_prob
        self.mask_time_length = mask_time_length
        self.mask_time_min_masks = mask_time_min_masks
        self.mask_feature_prob = mask_feature_prob
        self.mask_feature_length = mask_feature_length
        self.mask_feature_min_masks = mask_feature_min_masks
        self.median_filter_width = median_filter_width
        self.suppress_tokens = suppress_tokens
        self.begin_suppress_tokens = list(begin_suppress_tokens) if begin_suppress_tokens is not None else None
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            is_encoder_decoder=is_encoder_decoder,
            decoder_start_token_id=decoder_start_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        check_positive_ints(
            self,
            ("vocab_size", "num_mel_bins", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
             "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_source_positions",
             "max_target_positions"),
        )  # fmt: skip
        check_heads_divide(self, "d_model", "encoder_attention_heads")
        check_heads_divide(self, "d_model", "decoder_attention_heads")

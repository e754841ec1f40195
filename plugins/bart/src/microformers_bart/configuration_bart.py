"""``BartConfig`` and ``MBartConfig``: the ``config.json`` of ``model_type: bart`` / ``mbart`` checkpoints.

Imports no torch, so ``AutoConfig`` stays cheap.
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers_sdk.config_checks import check_heads_divide, check_positive_ints


class BartConfig(PretrainedConfig):
    """Encoder-decoder transformer with learned positions (offset 2) and post-norm layers."""

    model_type = "bart"
    attribute_map: ClassVar[dict[str, str]] = {
        "num_attention_heads": "encoder_attention_heads",
        "hidden_size": "d_model",
        "num_hidden_layers": "encoder_layers",
        "initializer_range": "init_std",
    }
    # BART's classification heads default to three labels (MNLI); its variants keep the usual two
    default_num_labels: ClassVar[int | None] = 3

    def __init__(
        self,
        vocab_size: int = 50265,
        max_position_embeddings: int = 1024,
        encoder_layers: int = 12,
        encoder_ffn_dim: int = 4096,
        encoder_attention_heads: int = 16,
        decoder_layers: int = 12,
        decoder_ffn_dim: int = 4096,
        decoder_attention_heads: int = 16,
        encoder_layerdrop: float = 0.0,
        decoder_layerdrop: float = 0.0,
        activation_function: str = "gelu",
        d_model: int = 1024,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        init_std: float = 0.02,
        classifier_dropout: float = 0.0,
        scale_embedding: bool = False,
        use_cache: bool = True,
        pad_token_id: int | None = 1,
        bos_token_id: int | None = 0,
        eos_token_id: int | list[int] | None = 2,
        is_encoder_decoder: bool = True,
        decoder_start_token_id: int | None = 2,
        forced_eos_token_id: int | list[int] | None = 2,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.encoder_ffn_dim = encoder_ffn_dim
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_layers = decoder_layers
        self.decoder_ffn_dim = decoder_ffn_dim
        self.decoder_attention_heads = decoder_attention_heads
        self.encoder_layerdrop = encoder_layerdrop
        self.decoder_layerdrop = decoder_layerdrop
        self.activation_function = activation_function
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.init_std = init_std
        self.classifier_dropout = classifier_dropout
        self.scale_embedding = scale_embedding
        self.use_cache = use_cache
        self.forced_eos_token_id = forced_eos_token_id
        if kwargs.get("id2label") is None and self.default_num_labels is not None:
            kwargs.setdefault("num_labels", self.default_num_labels)
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            is_encoder_decoder=is_encoder_decoder,
            decoder_start_token_id=decoder_start_token_id,
            **kwargs,
        )
        check_positive_ints(
            self,
            ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
             "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings"),
        )  # fmt: skip
        check_heads_divide(self, "d_model", "encoder_attention_heads")
        check_heads_divide(self, "d_model", "decoder_attention_heads")


class MBartConfig(BartConfig):
    """mBART: BART with pre-norm layers and a final layer norm; decoders start from a language code."""

    model_type = "mbart"
    default_num_labels = None

    def __init__(self, decoder_start_token_id: int | None = None, **kwargs: Any) -> None:
        super().__init__(decoder_start_token_id=decoder_start_token_id, **kwargs)

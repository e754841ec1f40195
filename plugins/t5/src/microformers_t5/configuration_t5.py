"""``T5Config`` (``model_type: t5``), ``MT5Config`` (``mt5``) and ``UMT5Config`` (``umt5``).

Imports no torch, so ``AutoConfig`` stays cheap. The three share every field; they differ in defaults and in two
behaviours the model reads off the config: ``scale_decoder_outputs`` (multiply the decoder output by
``d_model ** -0.5`` before the vocabulary projection) and ``relative_attention_per_layer`` (UMT5: every
self-attention layer owns its relative position bias instead of sharing the first layer's).
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_positive_ints

__all__ = ["MT5Config", "T5Config", "UMT5Config"]

# Written by the reference next to feed_forward_proj; recomputed from it here, never read.
_DERIVED_KEYS = ("dense_act_fn", "is_gated_act")


def parse_feed_forward_proj(value: Any, config_name: str) -> tuple[str, bool]:
    """``"relu"`` -> ``("relu", False)``, ``"gated-gelu"`` -> ``("gelu_new", True)``: activation and gating."""
    parts = value.split("-") if isinstance(value, str) else []
    if not all(parts) or len(parts) not in (1, 2) or (len(parts) == 2 and parts[0] != "gated"):
        raise ConfigError(
            f"feed_forward_proj={value!r} in {config_name} is not 'ACT' or 'gated-ACT' (e.g. 'relu', 'gated-gelu'); "
            "fix config.json"
        )
    activation = parts[-1]
    # The original gated-gelu checkpoints were trained with the tanh approximation.
    if value == "gated-gelu":
        activation = "gelu_new"
    return activation, parts[0] == "gated"


class T5Config(PretrainedConfig):
    """T5 v1.0 (``feed_forward_proj="relu"``, tied head, scaled decoder output) and v1.1 / Flan-T5
    (``"gated-gelu"``, ``tie_word_embeddings=False``: own ``lm_head``, no scaling).

    ``scale_decoder_outputs`` defaults to ``tie_word_embeddings`` (the reference's rule); a config.json
    that states it wins. ``num_decoder_layers`` defaults to ``num_layers``.
    """

    model_type = "t5"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers",
        "head_dim": "d_kv",
    }
    default_feed_forward_proj = "relu"
    # None: follow tie_word_embeddings.
    default_scale_decoder_outputs: bool | None = None
    relative_attention_per_layer = False

    def __init__(
        self,
        vocab_size: int = 32128,
        d_model: int = 512,
        d_kv: int = 64,
        d_ff: int = 2048,
        num_layers: int = 6,
        num_decoder_layers: int | None = None,
        num_heads: int = 8,
        relative_attention_num_buckets: int = 32,
        relative_attention_max_distance: int = 128,
        dropout_rate: float = 0.1,
        layer_norm_epsilon: float = 1e-6,
        initializer_factor: float = 1.0,
        feed_forward_proj: str | None = None,
        is_encoder_decoder: bool = True,
        use_cache: bool = True,
        pad_token_id: int | None = 0,
        eos_token_id: int | list[int] | None = 1,
        decoder_start_token_id: int | None = 0,
        classifier_dropout: float = 0.0,
        tie_word_embeddings: bool = True,
        scale_decoder_outputs: bool | None = None,
        **kwargs: Any,
    ) -> None:
        for key in _DERIVED_KEYS:
            kwargs.pop(key, None)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.d_kv = d_kv
        self.d_ff = d_ff
        self.num_layers = num_layers
        self.num_decoder_layers = num_layers if num_decoder_layers is None else num_decoder_layers
        self.num_heads = num_heads
        self.relative_attention_num_buckets = relative_attention_num_buckets
        self.relative_attention_max_distance = relative_attention_max_distance
        self.dropout_rate = dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_factor = initializer_factor
        self.feed_forward_proj = self.default_feed_forward_proj if feed_forward_proj is None else feed_forward_proj
        self.use_cache = use_cache
        self.classifier_dropout = classifier_dropout
        check_positive_ints(
            self, ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads")
        )
        check_positive_ints(self, ("relative_attention_num_buckets", "relative_attention_max_distance"))
        self.dense_act_fn, self.is_gated_act = parse_feed_forward_proj(self.feed_forward_proj, type(self).__name__)
        if scale_decoder_outputs is None:
            default = self.default_scale_decoder_outputs
            scale_decoder_outputs = tie_word_embeddings is not False if default is None else default
        self.scale_decoder_outputs = bool(scale_decoder_outputs)
        super().__init__(
            is_encoder_decoder=is_encoder_decoder,
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            decoder_start_token_id=decoder_start_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )


class MT5Config(T5Config):
    """mT5: T5 v1.1 trained on 101 languages; gated-GELU, a 250k vocabulary, never a scaled decoder output."""

    model_type = "mt5"
    default_feed_forward_proj = "gated-gelu"
    default_scale_decoder_outputs = False

    def __init__(
        self,
        vocab_size: int = 250112,
        d_model: int = 512,
        d_kv: int = 64,
        d_ff: int = 1024,
        num_layers: int = 8,
        num_heads: int = 6,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vocab_size=vocab_size, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=num_layers, num_heads=num_heads,
            **kwargs,
        )  # fmt: skip


class UMT5Config(MT5Config):
    """UMT5: mT5 whose every self-attention layer has its own relative position bias.

    The reference always scales its decoder output (it forces ``tie_word_embeddings`` on), whatever the file says.
    """

    model_type = "umt5"
    default_scale_decoder_outputs = True
    relative_attention_per_layer = True

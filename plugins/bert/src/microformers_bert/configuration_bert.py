"""``BertConfig``: the ``config.json`` of ``model_type: bert`` checkpoints (BERT, MiniLM, sentence-transformers ...).

Imports no torch, so ``AutoConfig`` stays cheap. Settings this plugin cannot honour (relative
position embeddings) are rejected here with a ``ConfigError`` naming the setting.
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_choice, check_heads_divide, check_positive_ints

SUPPORTED_POSITION_EMBEDDINGS = ("absolute",)


def check_chunk_size(config: PretrainedConfig) -> None:
    """``chunk_size_feed_forward`` is a whole number of positions, 0 meaning no chunking."""
    value = config.chunk_size_feed_forward
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"chunk_size_feed_forward={value!r} in {type(config).__name__} must be an integer >= 0: the number of "
            "positions the feed-forward block runs at a time (0: all at once)"
        )


class BertConfig(PretrainedConfig):
    """Bidirectional transformer encoder with learned absolute positions and token type embeddings."""

    model_type = "bert"

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-12,
        pad_token_id: int | None = 0,
        position_embedding_type: str = "absolute",
        use_cache: bool = True,
        classifier_dropout: float | None = None,
        chunk_size_feed_forward: int = 0,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.position_embedding_type = position_embedding_type
        self.use_cache = use_cache
        self.classifier_dropout = classifier_dropout
        self.chunk_size_feed_forward = chunk_size_feed_forward
        check_chunk_size(self)
        check_positive_ints(
            self, ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        )
        check_heads_divide(self)
        check_choice(self, "position_embedding_type", SUPPORTED_POSITION_EMBEDDINGS, "microformers-bert")
        super().__init__(pad_token_id=pad_token_id, **kwargs)

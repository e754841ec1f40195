"""``DistilBertConfig``: the ``config.json`` of ``model_type: distilbert`` checkpoints.

DistilBERT spells the usual sizes its own way (``dim``, ``n_layers``, ``n_heads``, ``hidden_dim``);
``hidden_size``, ``num_hidden_layers`` and ``num_attention_heads`` read and write those. Imports no
torch. Sizes and head counts are checked here, so a bad file is refused naming the field (and,
through ``from_pretrained``, the file).
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_heads_divide, check_positive_ints


class DistilBertConfig(PretrainedConfig):
    """A 6-layer BERT distilled: post-norm encoder, learned (or sinusoidal) positions, no token types."""

    model_type = "distilbert"
    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "dim",
        "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
    }

    def __init__(
        self,
        vocab_size: int = 30522,
        max_position_embeddings: int = 512,
        sinusoidal_pos_embds: bool = False,
        n_layers: int = 6,
        n_heads: int = 12,
        dim: int = 768,
        hidden_dim: int = 4 * 768,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation: str = "gelu",
        initializer_range: float = 0.02,
        qa_dropout: float = 0.1,
        seq_classif_dropout: float = 0.2,
        pad_token_id: int | None = 0,
        tie_word_embeddings: bool = True,
        chunk_size_feed_forward: int = 0,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.sinusoidal_pos_embds = sinusoidal_pos_embds
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.dim = dim
        self.hidden_dim = hidden_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.initializer_range = initializer_range
        self.qa_dropout = qa_dropout
        self.seq_classif_dropout = seq_classif_dropout
        self.chunk_size_feed_forward = chunk_size_feed_forward
        if isinstance(chunk_size_feed_forward, bool) or not isinstance(chunk_size_feed_forward, int) or (
            chunk_size_feed_forward < 0
        ):
            raise ConfigError(
                f"chunk_size_feed_forward={chunk_size_feed_forward!r} in DistilBertConfig must be an integer >= 0: the "
                "number of positions the feed-forward block runs at a time (0: all at once)"
            )
        check_positive_ints(self, ("vocab_size", "max_position_embeddings", "n_layers", "n_heads", "dim", "hidden_dim"))
        check_heads_divide(self, "dim", "n_heads")
        super().__init__(pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings, **kwargs)

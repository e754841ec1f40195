"""``RobertaConfig``: the ``config.json`` of ``model_type: roberta`` checkpoints (RoBERTa, and the base of XLM-R).

Imports no torch, so ``AutoConfig`` stays cheap. RoBERTa's position ids count from its padding index,
so ``pad_token_id`` must be a token of the vocabulary and a row of the position table; that, the
sizes and the head count are checked here, so a bad file is refused naming the field (and, through
``from_pretrained``, the file). Settings this plugin cannot honour (cross-attention,
relative position embeddings) are refused by name.
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_bert import check_chunk_size
from microformers_sdk.config_checks import check_choice, check_heads_divide, check_positive_ints

SUPPORTED_POSITION_EMBEDDINGS = ("absolute",)


class RobertaConfig(PretrainedConfig):
    """BERT's encoder trained without token types: positions start after the padding index."""

    model_type = "roberta"

    def __init__(
        self,
        vocab_size: int = 50265,
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
        pad_token_id: int | None = 1,
        bos_token_id: int | None = 0,
        eos_token_id: int | None = 2,
        position_embedding_type: str = "absolute",
        use_cache: bool = True,
        classifier_dropout: float | None = None,
        tie_word_embeddings: bool = True,
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
        name = type(self).__name__
        sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size")  # fmt: skip
        check_positive_ints(self, sizes)
        check_heads_divide(self)
        pad = pad_token_id
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < min(vocab_size, max_position_embeddings):
            raise ConfigError(
                f"pad_token_id={pad!r} in {name} must be a token id below vocab_size={vocab_size} and "
                f"max_position_embeddings={max_position_embeddings}: RoBERTa numbers positions from the padding "
                "index; fix config.json (RoBERTa and XLM-R checkpoints use pad_token_id=1)"
            )
        check_choice(self, "position_embedding_type", SUPPORTED_POSITION_EMBEDDINGS, "microformers-roberta")
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )

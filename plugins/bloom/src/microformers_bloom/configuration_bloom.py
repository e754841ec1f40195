"""``BloomConfig``: the ``config.json`` of ``model_type: bloom`` checkpoints (BLOOM, BLOOMZ, 560M to 176B).

Imports no torch, so ``AutoConfig`` stays cheap. The files' own names ``n_layer`` and ``n_head`` are kept
(``num_hidden_layers`` / ``num_attention_heads`` read them). ``pretraining_tp`` and ``slow_but_exact``
only changed how the original Megatron code split its matrix products: the results are the same
products, so both are accepted, kept for round trips, and have no effect.
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_positive_ints


class BloomConfig(PretrainedConfig):
    """Decoder-only transformer with ALiBi attention, LayerNorm (also on the embeddings) and a GELU MLP."""

    model_type = "bloom"
    attribute_map: ClassVar[dict[str, str]] = {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"}

    def __init__(
        self,
        vocab_size: int = 250880,
        hidden_size: int = 64,
        n_layer: int = 2,
        n_head: int = 8,
        layer_norm_epsilon: float = 1e-5,
        initializer_range: float = 0.02,
        use_cache: bool = True,
        bos_token_id: int | None = 1,
        eos_token_id: int | list[int] | None = 2,
        pad_token_id: int | None = None,
        apply_residual_connection_post_layernorm: bool = False,
        hidden_dropout: float = 0.0,
        attention_dropout: float = 0.0,
        pretraining_tp: int = 1,
        slow_but_exact: bool = False,
        tie_word_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        n_embed = kwargs.pop("n_embed", None)  # the oldest files' name for hidden_size
        stated_head_dim = kwargs.pop("head_dim", None)  # derived here; a file may still state it
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size if n_embed is None else n_embed
        self.n_layer = n_layer
        self.n_head = n_head
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        self.apply_residual_connection_post_layernorm = apply_residual_connection_post_layernorm
        self.hidden_dropout = hidden_dropout
        self.attention_dropout = attention_dropout
        self.pretraining_tp = pretraining_tp
        self.slow_but_exact = slow_but_exact
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        check_positive_ints(self, ("vocab_size", "hidden_size", "n_layer", "n_head"))
        if self.hidden_size % self.n_head:
            raise ConfigError(
                f"hidden_size={self.hidden_size} is not divisible by n_head={self.n_head}; fix one of them in config.json"
            )
        if stated_head_dim is not None and stated_head_dim != self.head_dim:
            raise ConfigError(
                f"head_dim={stated_head_dim!r} disagrees with hidden_size / n_head = {self.head_dim}; "
                "remove head_dim from config.json or fix the sizes"
            )
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                raise ConfigError(f"{name}={value!r} must be a probability in [0, 1); fix config.json")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_head

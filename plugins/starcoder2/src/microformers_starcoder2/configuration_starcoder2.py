"""``Starcoder2Config``: the ``config.json`` of ``model_type: starcoder2`` checkpoints (StarCoder2 3B/7B/15B).

Imports no torch, so ``AutoConfig`` stays cheap. Rotary settings are kept as ``rope_theta`` plus
``rope_scaling``; files using ``rope_parameters`` (what the reference writes) are converted on load,
and ``config.rope_parameters`` shows the merged view. Sizes, dropouts and the sliding window are
checked when the config is built, so a bad file is refused naming the field.
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_attention_heads, check_positive_ints
from microformers_sdk.rope_settings import RopeParametersMixin, normalize_rope_settings


class Starcoder2Config(RopeParametersMixin, PretrainedConfig):
    """Decoder-only transformer with LayerNorm, rotary positions, grouped-query attention and a GELU MLP."""

    model_type = "starcoder2"

    def __init__(
        self,
        vocab_size: int = 49152,
        hidden_size: int = 3072,
        intermediate_size: int = 12288,
        num_hidden_layers: int = 30,
        num_attention_heads: int = 24,
        num_key_value_heads: int = 2,
        hidden_act: str = "gelu_pytorch_tanh",
        max_position_embeddings: int = 4096,
        initializer_range: float = 0.018042,
        norm_epsilon: float = 1e-5,
        use_cache: bool = True,
        bos_token_id: int | None = 50256,
        eos_token_id: int | list[int] | None = 50256,
        pad_token_id: int | None = None,
        rope_theta: float = 10000.0,
        rope_scaling: dict[str, Any] | None = None,
        sliding_window: int | None = None,
        attention_dropout: float = 0.0,
        residual_dropout: float = 0.0,
        embedding_dropout: float = 0.0,
        use_bias: bool = True,
        tie_word_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        rope_parameters = kwargs.pop("rope_parameters", None)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.norm_epsilon = norm_epsilon
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.sliding_window = sliding_window
        self.attention_dropout = attention_dropout
        self.residual_dropout = residual_dropout
        self.embedding_dropout = embedding_dropout
        self.use_bias = use_bias
        if rope_parameters is not None:
            self.rope_parameters = rope_parameters
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        check_attention_heads(self, None)
        check_positive_ints(self, ("max_position_embeddings",))
        if self.sliding_window is not None:
            check_positive_ints(self, ("sliding_window",))
        for name in ("attention_dropout", "residual_dropout", "embedding_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                raise ConfigError(f"{name}={value!r} must be a probability in [0, 1); fix config.json")
        self.head_dim = hidden_size // num_attention_heads
        normalize_rope_settings(
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            setting=f"{type(self).__name__}.rope_scaling",
        )

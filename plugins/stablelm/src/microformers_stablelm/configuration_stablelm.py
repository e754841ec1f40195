"""``StableLmConfig``: the ``config.json`` of ``model_type: stablelm`` checkpoints (StableLM 2, StableLM 3B 4E1T,
StableCode).

Imports no torch, so ``AutoConfig`` stays cheap. Rotary settings are kept as ``rope_theta``,
``rope_scaling`` and ``partial_rotary_factor`` (0.25 unless the file says otherwise: only the first quarter
of each head is rotated); files using ``rope_parameters`` (what the reference writes, the partial factor
inside it) are converted on load, and ``config.rope_parameters`` shows the merged view. Sizes, dropouts
and the partial factor are checked when the config is built, so a bad file is refused naming the field.
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_attention_heads, check_positive_ints
from microformers_sdk.rope_settings import RopeParametersMixin, normalize_rope_settings


class StableLmConfig(RopeParametersMixin, PretrainedConfig):
    """Decoder-only transformer with LayerNorm, partial rotary positions, a SwiGLU MLP and optional parallel
    residual, q/k/v biases and per-head q/k LayerNorm."""

    rope_parameters_take_partial_rotary_factor = True

    model_type = "stablelm"

    def __init__(
        self,
        vocab_size: int = 50304,
        intermediate_size: int = 6912,
        hidden_size: int = 2560,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 32,
        hidden_act: str = "silu",
        max_position_embeddings: int = 4096,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1.0e-5,
        use_cache: bool = True,
        tie_word_embeddings: bool = False,
        rope_theta: float | None = 10000.0,
        rope_scaling: dict[str, Any] | None = None,
        partial_rotary_factor: float | None = 0.25,
        use_qkv_bias: bool = False,
        qk_layernorm: bool = False,
        use_parallel_residual: bool = False,
        hidden_dropout: float = 0.0,
        attention_dropout: float = 0.0,
        bos_token_id: int | None = 0,
        eos_token_id: int | list[int] | None = 0,
        pad_token_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        rope_parameters = kwargs.pop("rope_parameters", None)
        self.vocab_size = vocab_size
        self.intermediate_size = intermediate_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.use_cache = use_cache
        self.rope_theta = (
            10000.0 if rope_theta is None else rope_theta
        )  # the reference writes null beside rope_parameters
        self.rope_scaling = rope_scaling
        self.partial_rotary_factor = 0.25 if partial_rotary_factor is None else partial_rotary_factor
        self.use_qkv_bias = use_qkv_bias
        self.qk_layernorm = qk_layernorm
        self.use_parallel_residual = use_parallel_residual
        self.hidden_dropout = hidden_dropout
        self.attention_dropout = attention_dropout
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
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                raise ConfigError(f"{name}={value!r} must be a probability in [0, 1); fix config.json")
        factor = self.partial_rotary_factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
            raise ConfigError(f"partial_rotary_factor={factor!r} must be in (0, 1]; fix config.json")
        self.head_dim = hidden_size // num_attention_heads
        normalize_rope_settings(
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            partial_rotary_factor=self.partial_rotary_factor,
            setting=f"{type(self).__name__}.rope_scaling",
        )

"""``FalconConfig``: the ``config.json`` of ``model_type: falcon`` checkpoints (Falcon 7B/40B/180B, Falcon 1B/RW
layouts with rotary positions, Falcon2 11B).

Imports no torch, so ``AutoConfig`` stays cheap. Three attention layouts share one fused
``query_key_value`` projection: the *new decoder architecture* (40B/180B: ``num_kv_heads`` groups, each
its query heads then one key and one value head), *multi-query* (7B: all query heads, then one key and one
value head) and the original one (per head: query, key, value). ALiBi positions (``alibi: true``, the
Falcon-RW checkpoints) are not implemented and are refused when the config is built, naming the setting.
Rotary settings are kept as ``rope_theta`` plus ``rope_scaling``; ``rope_parameters`` files are converted.
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_positive_ints
from microformers_sdk.rope_settings import RopeParametersMixin, normalize_rope_settings


class FalconConfig(RopeParametersMixin, PretrainedConfig):
    """Decoder-only transformer with a fused QKV projection, rotary positions, LayerNorm and a GELU MLP."""

    model_type = "falcon"

    def __init__(
        self,
        vocab_size: int = 65024,
        hidden_size: int = 4544,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 71,
        num_ln_in_parallel_attn: int | None = None,
        layer_norm_epsilon: float = 1e-5,
        initializer_range: float = 0.02,
        use_cache: bool = True,
        hidden_dropout: float = 0.0,
        attention_dropout: float = 0.0,
        num_kv_heads: int | None = None,
        alibi: bool = False,
        new_decoder_architecture: bool = False,
        multi_query: bool = True,
        parallel_attn: bool = True,
        bias: bool = False,
        max_position_embeddings: int = 2048,
        rope_theta: float | None = 10000.0,
        rope_scaling: dict[str, Any] | None = None,
        bos_token_id: int | None = 11,
        eos_token_id: int | list[int] | None = 11,
        pad_token_id: int | None = None,
        ffn_hidden_size: int | None = None,
        activation: str = "gelu",
        tie_word_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        rope_parameters = kwargs.pop("rope_parameters", None)
        n_embed = kwargs.pop("n_embed", None)  # the oldest files' name for hidden_size
        stated_head_dim = kwargs.pop("head_dim", None)  # derived here; a file may still state it
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size if n_embed is None else n_embed
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_ln_in_parallel_attn = num_ln_in_parallel_attn
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        self.hidden_dropout = hidden_dropout
        self.attention_dropout = attention_dropout
        self.num_kv_heads = num_attention_heads if num_kv_heads is None else num_kv_heads
        self.alibi = alibi
        self.new_decoder_architecture = new_decoder_architecture
        self.multi_query = multi_query
        self.parallel_attn = parallel_attn
        self.bias = bias
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = 10000.0 if rope_theta is None else rope_theta
        self.rope_scaling = rope_scaling
        self.ffn_hidden_size = 4 * self.hidden_size if ffn_hidden_size is None else ffn_hidden_size
        self.activation = activation
        if rope_parameters is not None:
            self.rope_parameters = rope_parameters
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self._validate()
        if stated_head_dim is not None and stated_head_dim != self.head_dim:
            raise ConfigError(
                f"head_dim={stated_head_dim!r} disagrees with hidden_size / num_attention_heads = {self.head_dim}; "
                "remove head_dim from config.json or fix the sizes"
            )
        normalize_rope_settings(
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            setting=f"{type(self).__name__}.rope_scaling",
        )

    def _validate(self) -> None:
        check_positive_ints(
            self,
            (
                "vocab_size",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_kv_heads",
                "ffn_hidden_size",
            ),
        )
        check_positive_ints(self, ("max_position_embeddings",))
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}; "
                "fix one of them in config.json"
            )
        if self.alibi:
            raise ConfigError(
                "alibi=True (ALiBi positions, the Falcon-RW checkpoints) is not supported by microformers-falcon; "
                "only rotary Falcon checkpoints (alibi: false) load"
            )
        if self.new_decoder_architecture:
            if self.num_attention_heads % self.num_kv_heads:
                raise ConfigError(
                    f"num_attention_heads={self.num_attention_heads} is not a multiple of num_kv_heads="
                    f"{self.num_kv_heads}; the new decoder architecture groups query heads per key/value head. "
                    "Fix config.json"
                )
            if not self.parallel_attn:
                raise ConfigError(
                    "new_decoder_architecture=True with parallel_attn=False is not a Falcon layout (the new "
                    "architecture runs attention and MLP in parallel); set parallel_attn to true in config.json"
                )
        if self.num_ln_in_parallel_attn not in (None, 1, 2):
            raise ConfigError(f"num_ln_in_parallel_attn={self.num_ln_in_parallel_attn!r} must be 1, 2 or null")
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                raise ConfigError(f"{name}={value!r} must be a probability in [0, 1); fix config.json")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def key_value_heads(self) -> int:
        """Key/value heads the attention computes: ``num_kv_heads`` (new architecture), 1 (multi-query) or all."""
        if self.new_decoder_architecture:
            return self.num_kv_heads
        return 1 if self.multi_query else self.num_attention_heads

    @property
    def layer_norms(self) -> int:
        """Norms before a parallel block: 2 (``ln_attn``/``ln_mlp``, the new architecture's default) or 1."""
        if self.new_decoder_architecture and self.num_ln_in_parallel_attn in (None, 2):
            return 2
        return 1

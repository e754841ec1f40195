"""``Phi3Config``: the ``config.json`` of ``model_type: phi3`` checkpoints (Phi-3 / Phi-3.5 mini and medium, Phi-4-mini).

Imports no torch, so ``AutoConfig`` stays cheap. Rotary settings are kept in the widely read spelling
(``rope_theta`` plus ``rope_scaling``); files using ``rope_parameters`` (what the reference writes) are
converted on load, and ``config.rope_parameters`` shows the merged view. LongRoPE (``rope_scaling``
type ``"longrope"``, legacy ``"su"``, and ``"yarn"``, which Phi-3 files used for the same thing) is
stored as ``"longrope"``. Head counts, sizes, the sliding window and the LongRoPE factor lists are
checked when the config is built, so a bad file is refused naming the field (and, through
``from_pretrained``, the file).
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.rope_settings import RopeParametersMixin, normalize_rope_settings

# Rotary scaling names Phi-3 files use for LongRoPE (the reference reads all three as "longrope").
_LONGROPE_NAMES = ("longrope", "su", "yarn")


def _positive_int(config: PretrainedConfig, name: str, value: Any = None) -> None:
    value = getattr(config, name) if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name}={value!r} in {type(config).__name__} must be a positive integer; fix config.json")


class Phi3Config(RopeParametersMixin, PretrainedConfig):
    """Decoder-only transformer with fused ``qkv_proj`` / ``gate_up_proj``, RMSNorm and (LongRoPE) rotary positions."""

    rope_parameters_take_partial_rotary_factor = True

    model_type = "phi3"

    def __init__(
        self,
        vocab_size: int = 32064,
        hidden_size: int = 3072,
        intermediate_size: int = 8192,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = None,
        head_dim: int | None = None,
        resid_pdrop: float = 0.0,
        embd_pdrop: float = 0.0,
        attention_dropout: float = 0.0,
        hidden_act: str = "silu",
        max_position_embeddings: int = 4096,
        original_max_position_embeddings: int = 4096,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-5,
        use_cache: bool = True,
        tie_word_embeddings: bool = False,
        rope_theta: float = 10000.0,
        rope_scaling: dict[str, Any] | None = None,
        partial_rotary_factor: float | None = None,
        bos_token_id: int | None = 1,
        eos_token_id: int | list[int] | None = 32000,
        pad_token_id: int | None = 32000,
        sliding_window: int | None = None,
        **kwargs: Any,
    ) -> None:
        rope_parameters = kwargs.pop("rope_parameters", None)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.resid_pdrop = resid_pdrop
        self.embd_pdrop = embd_pdrop  # kept for round trips; the reference's Phi-3 applies no embedding dropout
        self.attention_dropout = attention_dropout
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.original_max_position_embeddings = original_max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        if partial_rotary_factor is not None:
            self.partial_rotary_factor = partial_rotary_factor
        self.sliding_window = sliding_window
        if rope_parameters is not None:
            self.rope_parameters = rope_parameters
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self._validate(head_dim)
        # The size of one attention head (the reference reads ``head_dim`` the same way when a file sets it).
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_attention_heads
        normalize_rope_settings(
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            partial_rotary_factor=getattr(self, "partial_rotary_factor", None),
            original_max_position_embeddings=self.original_max_position_embeddings,
            setting=f"{type(self).__name__}.rope_scaling",
        )

    def _validate(self, head_dim: int | None) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
            _positive_int(self, name)
        _positive_int(self, "num_key_value_heads")
        _positive_int(self, "max_position_embeddings")
        _positive_int(self, "original_max_position_embeddings")
        if head_dim is not None:
            _positive_int(self, "head_dim", head_dim)
        elif self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}; "
                "fix one of them in config.json"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}; grouped-query attention needs every key/value head "
                "to serve the same number of query heads. Fix config.json"
            )
        if self.sliding_window is not None:
            _positive_int(self, "sliding_window")
        for name in ("resid_pdrop", "attention_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                raise ConfigError(f"{name}={value!r} must be a probability in [0, 1); fix config.json")
        scaling = self.rope_scaling
        if isinstance(scaling, dict):
            rope_type = scaling.get("rope_type", scaling.get("type"))
            if rope_type in _LONGROPE_NAMES:
                scaling = {k: v for k, v in scaling.items() if k != "type"}
                scaling["rope_type"] = "longrope"
                self.rope_scaling = scaling
            elif rope_type not in (None, "default"):
                raise ConfigError(
                    f"{type(self).__name__}.rope_scaling type {rope_type!r} is not one Phi-3 uses; use 'longrope' "
                    "(or null for plain rotary positions) in config.json"
                )

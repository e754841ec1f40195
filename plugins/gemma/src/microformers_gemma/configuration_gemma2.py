"""``Gemma2Config``: the ``config.json`` of ``model_type: gemma2`` checkpoints (Gemma 2 2B, 9B, 27B).

Imports no torch, so ``AutoConfig`` stays cheap. Every field the model reads is checked when the
config is built, so a bad file is refused with an error naming the field (and, through
``from_pretrained``, the file). Rotary settings are stored in the reference's current spelling,
``rope_parameters = {"rope_type": ..., "rope_theta": ...}``; files with the older ``rope_theta`` /
``rope_scaling`` keys are converted on load.

The attention layout is one entry per layer in ``layer_types``: ``"sliding_attention"`` layers see
the last ``sliding_window`` tokens, ``"full_attention"`` layers everything (Gemma 2 alternates,
starting with a sliding layer).
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.rope_settings import RopeSettings, normalize_rope_settings

SLIDING, FULL = "sliding_attention", "full_attention"
LAYER_TYPES = (SLIDING, FULL)


def positive_int(owner: PretrainedConfig, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name}={value!r} in {type(owner).__name__} must be a positive integer; fix config.json")


def positive_number_or_none(owner: PretrainedConfig, name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(
            f"{name}={value!r} in {type(owner).__name__} must be a positive number (or null to turn it off); "
            "fix config.json"
        )


class Gemma2Config(PretrainedConfig):
    """Gemma 2: scaled embeddings, GeGLU MLP, pre- and post-norms, soft-capped logits, local/global layers."""

    model_type = "gemma2"
    # How tensor parallelism splits the base model (from_pretrained(..., tp_plan="auto")): as Llama's, the
    # attention's and MLP's input projections by output rows, their output projections by input columns.
    base_model_tp_plan: ClassVar[dict[str, str]] = {
        "layers.*.self_attn.q_proj": "colwise",
        "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }
    # What the layers of a file without ``layer_types`` look like: every other layer slides.
    default_sliding_pattern = 2

    def __init__(
        self,
        vocab_size: int = 256000,
        hidden_size: int = 2304,
        intermediate_size: int = 9216,
        num_hidden_layers: int = 26,
        num_attention_heads: int = 8,
        num_key_value_heads: int = 4,
        head_dim: int = 256,
        hidden_activation: str = "gelu_pytorch_tanh",
        max_position_embeddings: int = 8192,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = True,
        pad_token_id: int | None = 0,
        eos_token_id: int | list[int] | None = 1,
        bos_token_id: int | None = 2,
        tie_word_embeddings: bool = True,
        rope_parameters: dict[str, Any] | None = None,
        attention_bias: bool = False,
        attention_dropout: float = 0.0,
        query_pre_attn_scalar: float = 256,
        sliding_window: int | None = 4096,
        layer_types: list[str] | None = None,
        final_logit_softcapping: float | None = 30.0,
        attn_logit_softcapping: float | None = 50.0,
        use_bidirectional_attention: bool | None = None,
        **kwargs: Any,
    ) -> None:
        rope_theta = kwargs.pop("rope_theta", None)
        rope_scaling = kwargs.pop("rope_scaling", None)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.hidden_activation = hidden_activation
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.attention_bias = attention_bias
        self.attention_dropout = attention_dropout
        self.query_pre_attn_scalar = query_pre_attn_scalar
        self.sliding_window = sliding_window
        self.final_logit_softcapping = final_logit_softcapping
        self.attn_logit_softcapping = attn_logit_softcapping
        self.use_bidirectional_attention = use_bidirectional_attention
        self._validate_sizes()
        if layer_types is None:
            pattern = kwargs.get("sliding_window_pattern", self.default_sliding_pattern)
            positive_int(self, "sliding_window_pattern", pattern)
            layer_types = [SLIDING if (i + 1) % pattern else FULL for i in range(num_hidden_layers)]
        self.layer_types = layer_types
        self.rope_parameters = self._merge_rope(rope_parameters, rope_theta, rope_scaling)
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self._validate_attention()
        for layer_type in sorted(set(self.layer_types)):
            self.rope_settings(layer_type)  # refuses unsupported or incomplete rotary settings now

    # -- rotary settings ---------------------------------------------------------------------------
    def _merge_rope(
        self, rope_parameters: dict[str, Any] | None, rope_theta: Any, rope_scaling: dict[str, Any] | None
    ) -> dict[str, Any]:
        """``rope_parameters`` in the reference's spelling from either spelling of the file."""
        params: dict[str, Any] = {}
        for name, source in (("rope_parameters", rope_parameters), ("rope_scaling", rope_scaling)):
            if source is None:
                continue
            if not isinstance(source, dict):
                raise ConfigError(f"{name} must be a JSON object (or null), got {type(source).__name__}: {source!r}")
            params.update(source)
        if "type" in params:
            params.setdefault("rope_type", params.pop("type"))
        params.setdefault("rope_type", "default")
        params.setdefault("rope_theta", 10000.0 if rope_theta is None else rope_theta)
        return params

    @property
    def rope_theta(self) -> float:
        return self.rope_parameters["rope_theta"]

    def layer_rope_parameters(self, layer_type: str) -> dict[str, Any]:
        """The rotary settings of layers of ``layer_type`` (Gemma 2: the same for every layer)."""
        return self.rope_parameters

    def rope_settings(self, layer_type: str) -> RopeSettings:
        return normalize_rope_settings(
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rope_parameters=self.layer_rope_parameters(layer_type),
            setting=f"{type(self).__name__}.rope_parameters",
        )

    # -- per-layer attention layout ----------------------------------------------------------------
    def layer_sliding_window(self, layer_idx: int) -> int | None:
        """The attention window of layer ``layer_idx`` in tokens, or ``None`` for full attention."""
        return self.sliding_window if self.layer_types[layer_idx] == SLIDING else None

    # -- validation --------------------------------------------------------------------------------
    def _validate_sizes(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            positive_int(self, name, getattr(self, name))
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size={self.hidden_size} is not a multiple of num_attention_heads={self.num_attention_heads} "
                f"({type(self).__name__}); fix one of them in config.json"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}; grouped-query attention needs every key/value head "
                "to serve the same number of query heads. Fix config.json"
            )
        if not isinstance(self.hidden_activation, str):
            raise ConfigError(
                f"hidden_activation={self.hidden_activation!r} must name an activation (e.g. 'gelu_pytorch_tanh'); "
                "fix config.json"
            )
        for name in ("query_pre_attn_scalar", "rms_norm_eps"):
            value = getattr(self, name)
            if value is None:
                raise ConfigError(
                    f"{name}=null in {type(self).__name__}: it must be a positive number; fix config.json"
                )
            positive_number_or_none(self, name, value)
        for name in ("final_logit_softcapping", "attn_logit_softcapping"):
            positive_number_or_none(self, name, getattr(self, name))

    def _validate_attention(self) -> None:
        types = self.layer_types
        if not isinstance(types, list) or len(types) != self.num_hidden_layers:
            raise ConfigError(
                f"layer_types={types!r} must list one entry per layer (num_hidden_layers={self.num_hidden_layers}); "
                "fix config.json"
            )
        unknown = sorted({str(t) for t in types} - set(LAYER_TYPES))
        if unknown:
            raise ConfigError(
                f"layer_types holds {unknown}; each entry must be one of {list(LAYER_TYPES)}. Fix config.json"
            )
        if SLIDING in types:
            positive_int(self, "sliding_window", self.sliding_window)
        elif self.sliding_window is not None:
            positive_int(self, "sliding_window", self.sliding_window)
        if self.use_bidirectional_attention:
            raise ConfigError(
                f"use_bidirectional_attention=true in {type(self).__name__} (an embedding model's encoder layout) is "
                "not supported by microformers-gemma: only causal decoders are. Set it to false or null in config.json"
            )
        dropout = self.attention_dropout
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout < 1:
            raise ConfigError(f"attention_dropout={dropout!r} must be a number in [0, 1); fix config.json")

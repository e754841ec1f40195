"""``Qwen2MoeConfig``: the ``config.json`` of ``model_type: qwen2_moe`` checkpoints (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B).

A Qwen2-shaped decoder (biased q/k/v projections, grouped-query attention, rotary positions) in which
layer ``i`` is a sparse mixture of ``num_experts`` SwiGLU experts of width ``moe_intermediate_size``
(``num_experts_per_tok`` per token) plus a gated shared expert of width ``shared_expert_intermediate_size``
when ``(i + 1) % decoder_sparse_step == 0`` and ``i`` is not in ``mlp_only_layers``; other layers have a
dense MLP of width ``intermediate_size``. With ``use_sliding_window``, the layers ``layer_types`` marks
``"sliding_attention"`` attend within ``sliding_window`` tokens (by default the even-numbered layers below
``max_window_layers``, as the reference derives them).

Imports no torch, so ``AutoConfig`` stays cheap. Sizes, head counts, expert counts and layer lists are
checked when the config is built, so a bad file is refused naming the field (and, through
``from_pretrained``, the file).
"""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_attention_heads
from microformers_sdk.moe import check_expert_counts
from microformers_sdk.rope_settings import check_config_rope_parameters, merged_rope_parameters

_LAYER_TYPES = ("full_attention", "sliding_attention")


def _positive_int(config: PretrainedConfig, name: str, minimum: int = 1) -> None:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive" if minimum == 1 else "a non-negative"
        raise ConfigError(f"{name}={value!r} in {type(config).__name__} must be {what} integer; fix config.json")


class Qwen2MoeConfig(PretrainedConfig):
    """``model_type: qwen2_moe``."""

    model_type = "qwen2_moe"

    def __init__(
        self,
        vocab_size: int = 151936,
        hidden_size: int = 2048,
        intermediate_size: int = 5632,
        num_hidden_layers: int = 24,
        num_attention_heads: int = 16,
        num_key_value_heads: int | None = 16,
        hidden_act: str = "silu",
        max_position_embeddings: int = 32768,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = True,
        tie_word_embeddings: bool = False,
        rope_parameters: dict[str, Any] | None = None,
        use_sliding_window: bool = False,
        sliding_window: int | None = 4096,
        max_window_layers: int = 28,
        attention_dropout: float = 0.0,
        decoder_sparse_step: int = 1,
        moe_intermediate_size: int = 1408,
        shared_expert_intermediate_size: int = 5632,
        num_experts_per_tok: int = 4,
        num_experts: int = 60,
        norm_topk_prob: bool = False,
        output_router_logits: bool = False,
        router_aux_loss_coef: float = 0.001,
        mlp_only_layers: list[int] | None = None,
        qkv_bias: bool = True,
        layer_types: list[str] | None = None,
        pad_token_id: int | None = None,
        bos_token_id: int | None = None,
        eos_token_id: int | list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        rope_theta = kwargs.pop("rope_theta", None)
        rope_scaling = kwargs.pop("rope_scaling", None)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.use_sliding_window = use_sliding_window
        self.sliding_window = sliding_window if use_sliding_window else 0  # the reference stores 0 when off
        self.max_window_layers = max_window_layers
        self.attention_dropout = attention_dropout
        self.decoder_sparse_step = decoder_sparse_step
        self.moe_intermediate_size = moe_intermediate_size
        self.shared_expert_intermediate_size = shared_expert_intermediate_size
        self.num_experts_per_tok = num_experts_per_tok
        self.num_experts = num_experts
        self.norm_topk_prob = norm_topk_prob
        self.output_router_logits = output_router_logits
        self.router_aux_loss_coef = router_aux_loss_coef
        self.mlp_only_layers = [] if mlp_only_layers is None else mlp_only_layers
        self.qkv_bias = qkv_bias
        self._validate(kwargs.get("head_dim"))
        if layer_types is None:
            layer_types = [
                "sliding_attention"
                if (i + 1) % 2 and i < max_window_layers and use_sliding_window
                else "full_attention"
                for i in range(num_hidden_layers)
            ]
        if len(layer_types) != num_hidden_layers or any(t not in _LAYER_TYPES for t in layer_types):
            raise ConfigError(
                f"layer_types must list {num_hidden_layers} entries (num_hidden_layers), each one of "
                f"{list(_LAYER_TYPES)}; got {layer_types!r}. Fix config.json"
            )
        self.layer_types = list(layer_types)
        self.rope_parameters = merged_rope_parameters(rope_theta, rope_scaling, rope_parameters, default_theta=10000.0)
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        check_config_rope_parameters(self, max_position_embeddings)

    def _validate(self, head_dim: Any) -> None:
        check_attention_heads(self, head_dim)
        for name in ("decoder_sparse_step", "moe_intermediate_size"):
            _positive_int(self, name)
        _positive_int(self, "shared_expert_intermediate_size", minimum=0)
        if self.use_sliding_window:
            window = self.sliding_window
            if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
                raise ConfigError(
                    f"sliding_window={window!r} must be a positive integer when use_sliding_window is true; "
                    "fix config.json"
                )
        check_expert_counts(self, "num_experts", allow_zero=True)
        layers = self.mlp_only_layers
        if not isinstance(layers, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in layers):
            raise ConfigError(f"mlp_only_layers={layers!r} must be a list of layer indices; fix config.json")

    @property
    def attention_head_dim(self) -> int:
        """``head_dim`` when the file sets one, else ``hidden_size // num_attention_heads``."""
        return self.__dict__.get("head_dim") or self.hidden_size // self.num_attention_heads

    @property
    def rope_theta(self) -> float:
        return self.rope_parameters["rope_theta"]

    def is_sparse_layer(self, layer_idx: int) -> bool:
        """Whether layer ``layer_idx`` has the mixture of experts (else a dense MLP)."""
        return (
            layer_idx not in self.mlp_only_layers
            and self.num_experts > 0
            and (layer_idx + 1) % self.decoder_sparse_step == 0
        )

    def layer_sliding_window(self, layer_idx: int) -> int | None:
        """The attention window of layer ``layer_idx`` in tokens, or ``None`` for full attention."""
        return self.sliding_window if self.layer_types[layer_idx] == "sliding_attention" else None

    def layer_attention_bias(self) -> bool:
        """Whether the q/k/v projections carry a bias (``qkv_bias``)."""
        return bool(self.qkv_bias)

"""``MixtralConfig``: the ``config.json`` of ``model_type: mixtral`` checkpoints (Mixtral 8x7B, 8x22B ...).

A Mistral-shaped decoder (grouped-query attention, rotary positions, optional ``sliding_window``) whose
MLP is a sparse mixture of ``num_local_experts`` SwiGLU experts, ``num_experts_per_tok`` of them per token.
``num_experts`` reads ``num_local_experts``, as in the reference.

Imports no torch, so ``AutoConfig`` stays cheap. Sizes, head counts and expert counts are checked
when the config is built, so a bad file is refused naming the field (and, through
``from_pretrained``, the file). Rotary settings are kept in the reference's ``rope_parameters``
spelling; the older ``rope_theta`` / ``rope_scaling`` keys are merged into it on load.
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers.errors import ConfigError
from microformers_sdk.config_checks import check_attention_heads
from microformers_sdk.moe import check_expert_counts
from microformers_sdk.rope_settings import check_config_rope_parameters, merged_rope_parameters


class MixtralConfig(PretrainedConfig):
    """``model_type: mixtral``: sparse-MoE decoder; ``sliding_window: null`` means full attention."""

    model_type = "mixtral"
    attribute_map: ClassVar[dict[str, str]] = {"num_experts": "num_local_experts"}

    def __init__(
        self,
        vocab_size: int = 32000,
        hidden_size: int = 4096,
        intermediate_size: int = 14336,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 8,
        head_dim: int | None = None,
        hidden_act: str = "silu",
        max_position_embeddings: int = 4096 * 32,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-5,
        use_cache: bool = True,
        pad_token_id: int | None = None,
        bos_token_id: int | None = 1,
        eos_token_id: int | list[int] | None = 2,
        tie_word_embeddings: bool = False,
        rope_parameters: dict[str, Any] | None = None,
        sliding_window: int | None = None,
        attention_dropout: float = 0.0,
        num_experts_per_tok: int = 2,
        num_local_experts: int = 8,
        output_router_logits: bool = False,
        router_aux_loss_coef: float = 0.001,
        router_jitter_noise: float = 0.0,
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
        self.head_dim = head_dim
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.sliding_window = sliding_window
        self.attention_dropout = attention_dropout
        self.num_experts_per_tok = num_experts_per_tok
        self.num_local_experts = num_local_experts
        self.output_router_logits = output_router_logits
        self.router_aux_loss_coef = router_aux_loss_coef
        self.router_jitter_noise = router_jitter_noise
        self._validate()
        self.rope_parameters = merged_rope_parameters(rope_theta, rope_scaling, rope_parameters, default_theta=1e6)
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        check_config_rope_parameters(self, max_position_embeddings)

    def _validate(self) -> None:
        check_attention_heads(self, self.head_dim)
        window = self.sliding_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
            raise ConfigError(f"sliding_window={window!r} must be a positive integer or null; fix config.json")
        check_expert_counts(self, "num_local_experts")

    @property
    def attention_head_dim(self) -> int:
        """``head_dim``, or ``hidden_size // num_attention_heads`` when the file leaves it null."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def rope_theta(self) -> float:
        return self.rope_parameters["rope_theta"]

    # -- per-layer attention layout (overridden by the Qwen2-MoE config) -------------------------------
    def layer_sliding_window(self, layer_idx: int) -> int | None:
        """The attention window of layer ``layer_idx`` in tokens (Mixtral: the same for every layer), or ``None``."""
        return self.sliding_window

    def layer_attention_bias(self) -> bool:
        """Whether the q/k/v projections carry a bias (Mixtral: no)."""
        return False

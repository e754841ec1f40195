"""``LlamaConfig``: the ``config.json`` of ``model_type: llama`` checkpoints (Llama 1-3, SmolLM, TinyLlama ...).

Imports no torch, so ``AutoConfig`` stays cheap. Rotary settings are kept in the widely read
spelling (``rope_theta`` plus ``rope_scaling``); files using ``rope_parameters`` are converted on load,
and ``config.rope_parameters`` shows the merged view.
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers_sdk.config_checks import check_attention_heads
from microformers_sdk.rope_settings import RopeParametersMixin, normalize_rope_settings


class LlamaConfig(RopeParametersMixin, PretrainedConfig):
    """Decoder-only transformer with RMSNorm, rotary embeddings, grouped-query attention and a SwiGLU MLP."""

    model_type = "llama"
    # How tensor parallelism splits the base model (from_pretrained(..., tp_plan="auto")), as the reference's
    # plan: query/key/value and gate/up split by output rows (each rank computes heads / tp heads), the output
    # and down projections by input columns, summed across ranks. Mistral, Qwen2 and Qwen3 inherit it.
    base_model_tp_plan: ClassVar[dict[str, str]] = {
        "layers.*.self_attn.q_proj": "colwise",
        "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }

    def __init__(
        self,
        vocab_size: int = 32000,
        hidden_size: int = 4096,
        intermediate_size: int = 11008,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = None,
        head_dim: int | None = None,
        hidden_act: str = "silu",
        max_position_embeddings: int = 2048,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = True,
        rope_theta: float = 10000.0,
        rope_scaling: dict[str, Any] | None = None,
        attention_bias: bool = False,
        attention_dropout: float = 0.0,
        mlp_bias: bool = False,
        pretraining_tp: int = 1,
        pad_token_id: int | None = None,
        bos_token_id: int | None = 1,
        eos_token_id: int | list[int] | None = 2,
        tie_word_embeddings: bool = False,
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
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.attention_bias = attention_bias
        self.attention_dropout = attention_dropout
        self.mlp_bias = mlp_bias
        self.pretraining_tp = pretraining_tp
        check_attention_heads(self, head_dim)
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_attention_heads
        if rope_parameters is not None:
            self.rope_parameters = rope_parameters
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        normalize_rope_settings(
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            setting=f"{type(self).__name__}.rope_scaling",
        )

    # -- per-layer attention layout (overridden by variants) ------------------------------------------
    def layer_sliding_window(self, layer_idx: int) -> int | None:
        """The attention window of layer ``layer_idx`` in tokens, or ``None`` for full attention."""
        return None

    def layer_attention_bias(self) -> tuple[bool, bool]:
        """Whether (q/k/v projections, output projection) carry a bias."""
        return bool(self.attention_bias), bool(self.attention_bias)

"""``GPT2Config``: the ``config.json`` of ``model_type: gpt2`` checkpoints (GPT-2, DistilGPT2, DialoGPT ...).

Imports no torch, so ``AutoConfig`` stays cheap. The file's own names (``n_embd``, ``n_layer``,
``n_head``, ``n_positions``) are stored; the common names (``hidden_size``, ``num_hidden_layers``,
``num_attention_heads``, ``max_position_embeddings``) read and write them through ``attribute_map``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from microformers import PretrainedConfig
from microformers.errors import ConfigError


class GPT2Config(PretrainedConfig):
    """Decoder-only transformer with learned absolute positions, pre-norm LayerNorm and a GELU MLP."""

    model_type = "gpt2"
    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    }

    def __init__(
        self,
        vocab_size: int = 50257,
        n_positions: int = 1024,
        n_embd: int = 768,
        n_layer: int = 12,
        n_head: int = 12,
        n_inner: int | None = None,
        activation_function: str = "gelu_new",
        resid_pdrop: float = 0.1,
        embd_pdrop: float = 0.1,
        attn_pdrop: float = 0.1,
        layer_norm_epsilon: float = 1e-5,
        initializer_range: float = 0.02,
        summary_type: str = "cls_index",
        summary_use_proj: bool = True,
        summary_activation: str | None = None,
        summary_proj_to_labels: bool = True,
        summary_first_dropout: float = 0.1,
        scale_attn_weights: bool = True,
        use_cache: bool = True,
        bos_token_id: int | None = 50256,
        eos_token_id: int | list[int] | None = 50256,
        scale_attn_by_inverse_layer_idx: bool = False,
        reorder_and_upcast_attn: bool = False,
        add_cross_attention: bool = False,
        **kwargs: Any,
    ) -> None:
        # The common names may be given instead of the file's own ones.
        n_embd = kwargs.pop("hidden_size", n_embd)
        n_positions = kwargs.pop("max_position_embeddings", n_positions)
        n_head = kwargs.pop("num_attention_heads", n_head)
        n_layer = kwargs.pop("num_hidden_layers", n_layer)
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_inner = n_inner
        self.activation_function = activation_function
        self.resid_pdrop = resid_pdrop
        self.embd_pdrop = embd_pdrop
        self.attn_pdrop = attn_pdrop
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.summary_type = summary_type
        self.summary_use_proj = summary_use_proj
        self.summary_activation = summary_activation
        self.summary_proj_to_labels = summary_proj_to_labels
        self.summary_first_dropout = summary_first_dropout
        self.scale_attn_weights = scale_attn_weights
        self.use_cache = use_cache
        self.scale_attn_by_inverse_layer_idx = scale_attn_by_inverse_layer_idx
        self.reorder_and_upcast_attn = reorder_and_upcast_attn
        self.add_cross_attention = add_cross_attention
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name}={value!r} in GPT2Config must be a positive integer; fix config.json")
        if n_embd % n_head:
            raise ConfigError(
                f"n_embd={n_embd} is not a multiple of n_head={n_head} in GPT2Config; fix config.json so each "
                "head gets n_embd / n_head dimensions"
            )
        super().__init__(bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)

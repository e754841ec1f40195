"""``Gemma3TextConfig``: the ``config.json`` of ``model_type: gemma3_text`` checkpoints (Gemma 3 1B, and the
text half of the larger multimodal Gemma 3 models).

Gemma 3 keeps Gemma 2's layout with three changes: five local (sliding-window) layers to every
global one by default (``sliding_window_pattern`` 6, or an explicit ``layer_types``), a separate
rotary base for the local layers, and no soft-capping by default (``attn_logit_softcapping`` is
stored but, as in the reference implementation, Gemma 3 attention does not apply it; a
``final_logit_softcapping`` is applied).

Rotary settings are keyed by layer type, the reference's current spelling::

    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}

Files with the older keys are converted on load: ``rope_theta`` (global base, default 1e6),
``rope_local_base_freq`` (local base, default 1e4) and ``rope_scaling`` (global layers only).
"""

from __future__ import annotations

from typing import Any

from microformers.errors import ConfigError

from .configuration_gemma2 import FULL, LAYER_TYPES, SLIDING, Gemma2Config


class Gemma3TextConfig(Gemma2Config):
    """``model_type: gemma3_text``: Gemma 2's decoder with q/k norms and local/global rotary bases."""

    model_type = "gemma3_text"
    default_sliding_pattern = 6

    def __init__(
        self,
        vocab_size: int = 262_208,
        max_position_embeddings: int = 131_072,
        final_logit_softcapping: float | None = None,
        attn_logit_softcapping: float | None = None,
        use_bidirectional_attention: bool | None = False,
        **kwargs: Any,
    ) -> None:
        self._rope_local_base_freq = kwargs.pop("rope_local_base_freq", None)
        super().__init__(
            vocab_size=vocab_size,
            max_position_embeddings=max_position_embeddings,
            final_logit_softcapping=final_logit_softcapping,
            attn_logit_softcapping=attn_logit_softcapping,
            use_bidirectional_attention=use_bidirectional_attention,
            **kwargs,
        )
        del self._rope_local_base_freq

    def _merge_rope(
        self, rope_parameters: dict[str, Any] | None, rope_theta: Any, rope_scaling: dict[str, Any] | None
    ) -> dict[str, Any]:
        if rope_parameters is not None and not isinstance(rope_parameters, dict):
            raise ConfigError(
                f"rope_parameters must be a JSON object keyed by layer type, got {type(rope_parameters).__name__}"
            )
        if rope_scaling is not None and not isinstance(rope_scaling, dict):
            raise ConfigError(f"rope_scaling must be a JSON object (or null), got {type(rope_scaling).__name__}")
        given = dict(rope_parameters or {})
        stray = sorted(set(given) - set(LAYER_TYPES))
        if stray:
            raise ConfigError(
                f"rope_parameters of a {self.model_type} config is keyed by layer type ({list(LAYER_TYPES)}), but holds "
                f"{stray}; move those settings under 'full_attention' (global layers) or 'sliding_attention' (local "
                "layers) in config.json"
            )
        params: dict[str, Any] = {}
        defaults = {FULL: rope_theta if rope_theta is not None else 1_000_000.0,
                    SLIDING: self._rope_local_base_freq if self._rope_local_base_freq is not None else 10_000.0}  # fmt: skip
        for layer_type in LAYER_TYPES:
            entry = given.get(layer_type) or {}
            if not isinstance(entry, dict):
                raise ConfigError(f"rope_parameters.{layer_type} must be a JSON object, got {entry!r}")
            entry = dict(entry)
            if layer_type == FULL and rope_scaling:
                entry.update(rope_scaling)
            if "type" in entry:
                entry.setdefault("rope_type", entry.pop("type"))
            entry.setdefault("rope_type", "default")
            entry.setdefault("rope_theta", defaults[layer_type])
            params[layer_type] = entry
        return params

    @property
    def rope_theta(self) -> float:
        return self.rope_parameters[FULL]["rope_theta"]

    @property
    def rope_local_base_freq(self) -> float:
        return self.rope_parameters[SLIDING]["rope_theta"]

    def layer_rope_parameters(self, layer_type: str) -> dict[str, Any]:
        return self.rope_parameters[layer_type]

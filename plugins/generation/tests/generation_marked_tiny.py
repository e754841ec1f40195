"""The tiny stand-in LM with one more forward input and a cache that crops, shared by the generation tests.

The class keeps its name ``_MarkedTiny``: generate()'s refusal of an unknown keyword names ``_MarkedTiny.forward``.
"""

from __future__ import annotations

from typing import Any

import torch
from generation_stand_ins import TinyCache, TinyConfig, TinyForCausalLM


class _CroppableTinyCache(TinyCache):
    def crop(self, length: int) -> None:
        self.states = self.states[:, :length]


class _MarkedTiny(TinyForCausalLM):
    """The tiny stand-in LM with one more forward input, recorded at each call, and a cache that crops.

    ``stale_at``: its cached states go stale once the sequence reaches that many tokens (as Phi-3's LongRoPE).
    """

    stale_at: int | None = None

    def cache_needs_recompute(self, past_length: int, total_length: int) -> bool:
        return self.stale_at is not None and past_length < self.stale_at <= total_length

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        marker: str | None = None,
        **kwargs: Any,
    ) -> Any:
        self.markers.append(marker)
        self.chunks.append((0 if past_key_values is None else past_key_values.get_seq_length(), input_ids.shape[1]))
        if use_cache and past_key_values is None:
            past_key_values = _CroppableTinyCache()
        return super().forward(
            input_ids, attention_mask, position_ids, past_key_values, use_cache, return_dict, **kwargs
        )


def marked_tiny() -> _MarkedTiny:
    torch.manual_seed(0)
    model = _MarkedTiny(TinyConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)).eval()
    model.markers, model.chunks = [], []
    return model

"""``least_likely``: each step appends the lowest-scoring token the processors still allow."""

from __future__ import annotations

from typing import Any

import torch

from microformers import GenerationConfig
from microformers_generation import IncrementalDecoder, Strategy


class LeastLikely(Strategy):
    """Prepared like the standard strategies (``Strategy.__call__``); only the loop is its own."""

    name = "least_likely"

    def applies(self, config: GenerationConfig) -> bool:
        return bool(getattr(config, "least_likely", False))

    def decode(
        self,
        model: Any,
        input_ids: torch.Tensor,
        *,
        generation_config: GenerationConfig,
        logits_processor: Any,
        stopping_criteria: Any,
        streamer: Any = None,
        model_kwargs: dict[str, Any],
    ) -> torch.Tensor:
        max_length = generation_config.max_length
        decoder = IncrementalDecoder(model, model_kwargs, max_length)
        sequences = input_ids
        logits = decoder.prefill(input_ids)
        while True:
            scores = logits_processor(sequences, logits)
            allowed = scores.masked_fill(torch.isinf(scores), float("inf"))
            sequences = torch.cat((sequences, allowed.argmin(dim=-1, keepdim=True)), dim=-1)
            if streamer is not None:
                streamer.put(sequences[:, -1].cpu())
            if sequences.shape[1] >= max_length or bool(stopping_criteria(sequences, None).all()):
                break
            logits = decoder.step(sequences)
        if streamer is not None:
            streamer.end()
        return sequences


least_likely = LeastLikely()

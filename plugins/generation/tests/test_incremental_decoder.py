"""IncrementalDecoder: a model whose cache goes stale gets the whole sequence with every position id; only the
tokens a cache lacks are fed, only the last logits are asked for, and the mask grows with ones."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from microformers_generation.decoding import IncrementalDecoder


class _Cache:
    def __init__(self, length: int) -> None:
        self.length = length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length


class _StaleCacheModel:
    """Records each forward; says its cache must be rebuilt when the sequence reaches ``recompute_at`` tokens."""

    def __init__(self, recompute_at: int) -> None:
        self.recompute_at = recompute_at
        self.calls: list[dict[str, Any]] = []

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: _Cache | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
    ) -> SimpleNamespace:
        self.calls.append({"input_ids": input_ids.clone(), "position_ids": position_ids.clone()})
        past = 0 if past_key_values is None else past_key_values.length
        batch, length = input_ids.shape
        return SimpleNamespace(logits=torch.zeros(batch, length, 4), past_key_values=_Cache(past + length))

    __call__ = forward

    def cache_needs_recompute(self, past_length: int, total_length: int) -> bool:
        return total_length == self.recompute_at


@pytest.mark.parametrize("padded", [True, False])
def test_recomputing_a_stale_cache_feeds_every_token_with_the_prefill_positions(padded: bool) -> None:
    model = _StaleCacheModel(recompute_at=5)
    kwargs: dict[str, Any] = {"use_cache": True}
    if padded:
        kwargs["attention_mask"] = torch.tensor([[0, 1, 1], [1, 1, 1]])
    decoder = IncrementalDecoder(model, kwargs, max_length=10)
    ids = torch.tensor([[0, 7, 8], [5, 6, 7]])
    decoder.prefill(ids)
    for token in (3, 4):
        ids = torch.cat((ids, torch.full((2, 1), token)), dim=1)
        decoder.step(ids)
    last = model.calls[-1]
    assert torch.equal(last["input_ids"], ids)  # the whole sequence, into a fresh cache
    expected = [[1, 0, 1, 2, 3], [0, 1, 2, 3, 4]] if padded else [[0, 1, 2, 3, 4]] * 2
    assert last["position_ids"].tolist() == expected
    assert model.calls[-2]["input_ids"].shape == (2, 1)  # the step before only fed its newest token


class _KeepingModel(_StaleCacheModel):
    """A model whose forward takes ``logits_to_keep`` and ``output_hidden_states`` (and nothing else)."""

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: _Cache | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,
        output_hidden_states: bool | None = None,
    ) -> SimpleNamespace:
        out = super().forward(input_ids, attention_mask, position_ids, past_key_values, use_cache, return_dict)
        self.calls[-1].update(logits_to_keep=logits_to_keep, mask=attention_mask)
        out.hidden_states = (torch.ones(1),) if output_hidden_states else None
        return out

    __call__ = forward


def test_decoder_asks_for_the_last_logits_only_and_keeps_outputs_only_when_asked() -> None:
    model = _KeepingModel(recompute_at=0)
    plain = IncrementalDecoder(model, {}, max_length=10)
    plain.prefill(torch.tensor([[4, 5]]))
    assert model.calls[-1]["logits_to_keep"] == 1 and plain.last_outputs is None
    with_states = IncrementalDecoder(model, {}, max_length=10, output_hidden_states=True)
    with_states.prefill(torch.tensor([[4, 5]]))
    assert with_states.last_outputs.hidden_states is not None


def test_decoder_feeds_only_the_tokens_a_given_cache_lacks() -> None:
    model = _StaleCacheModel(recompute_at=0)
    decoder = IncrementalDecoder(model, {"past_key_values": _Cache(3)}, max_length=10)
    decoder.prefill(torch.tensor([[4, 5, 6, 7, 8]]))
    assert model.calls[-1]["input_ids"].tolist() == [[7, 8]]
    assert model.calls[-1]["position_ids"].tolist() == [[3, 4]]


def test_decoder_mask_grows_past_its_first_chunk_with_ones() -> None:
    model = _KeepingModel(recompute_at=0)
    decoder = IncrementalDecoder(model, {"attention_mask": torch.tensor([[0, 1]]), "use_cache": True}, max_length=400)
    ids = torch.tensor([[0, 4]])
    decoder.prefill(ids)
    for _ in range(300):
        ids = torch.cat((ids, torch.tensor([[5]])), dim=1)
        decoder.step(ids)
    mask = model.calls[-1]["mask"]
    assert mask.shape == (1, 302) and mask[0, 0] == 0 and bool(mask[0, 1:].all())

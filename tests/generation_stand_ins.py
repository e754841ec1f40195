"""Stand-ins for the generation kernel tests: a tiny causal LM with a KV cache, a byte tokenizer.

They keep the kernel tests independent of any model or strategy plugin.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from microformers import PretrainedConfig, PreTrainedModel
from microformers.outputs import ModelOutput


class TinyCausalOutput(ModelOutput):
    logits: Any
    past_key_values: Any


class TinyCache:
    """Keeps the embeddings of past tokens; enough of the cache interface for decoding."""

    def __init__(self) -> None:
        self.states: torch.Tensor | None = None

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0 if self.states is None else self.states.shape[1]

    def append(self, states: torch.Tensor) -> torch.Tensor:
        self.states = states if self.states is None else torch.cat((self.states, states), dim=1)
        return self.states

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        self.states = self.states.index_select(0, beam_idx)


class TinyConfig(PretrainedConfig):
    model_type = "tiny-generation-test"

    def __init__(self, vocab_size: int = 24, hidden_size: int = 16, max_position_embeddings: int = 64, **kw: Any):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        super().__init__(**kw)


class TinyForCausalLM(PreTrainedModel):
    """Each position mixes the mean of the visible (unpadded, causal) token embeddings with its own."""

    config_class = TinyConfig

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.calls: list[dict[str, Any]] = []
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: TinyCache | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> TinyCausalOutput:
        self.calls.append(
            {"input_len": input_ids.shape[1], "mask": None if attention_mask is None else attention_mask.clone()}
        )
        cache = past_key_values if use_cache else None
        if use_cache and cache is None:
            cache = TinyCache()
        past = cache.get_seq_length() if cache is not None else 0
        new = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(past, past + new).unsqueeze(0)
        tokens = self.embed(input_ids)
        states = cache.append(tokens) if cache is not None else tokens
        total = states.shape[1]
        causal = torch.ones(new, total).tril(diagonal=past)
        mask = attention_mask[:, :total].float() if attention_mask is not None else torch.ones(1, total)
        weights = causal[None] * mask[:, None, :]
        context = weights @ states / weights.sum(-1, keepdim=True).clamp(min=1)
        hidden = torch.tanh(self.mix(context) + tokens + self.positions(position_ids))
        return TinyCausalOutput(logits=self.head(hidden) * 4, past_key_values=cache)


class ByteTokenizer:
    """Token id = one byte (ids >= 256 are special and decode to nothing)."""

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


@pytest.fixture
def tiny_model() -> TinyForCausalLM:
    torch.manual_seed(0)
    return TinyForCausalLM(TinyConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)).eval()


@pytest.fixture
def tiny_model_class() -> type[TinyForCausalLM]:
    return TinyForCausalLM


@pytest.fixture
def tiny_config_class() -> type[TinyConfig]:
    return TinyConfig


@pytest.fixture
def byte_tokenizer() -> ByteTokenizer:
    return ByteTokenizer()

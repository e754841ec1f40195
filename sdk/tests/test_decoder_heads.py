"""The shared decoder heads: logits_to_keep slicing, last-token pooling, and a toy head built on the mixins."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from microformers import PretrainedConfig, PreTrainedModel
from microformers.errors import InputError
from microformers_sdk.decoder_heads import (
    DecoderForCausalLM,
    DecoderForSequenceClassification,
    keep_logits_positions,
    pool_last_tokens,
)
from microformers_sdk.outputs import BaseModelOutputWithPast


class HeadsToyConfig(PretrainedConfig):
    model_type = "decoder-heads-toy"

    def __init__(self, vocab_size: int = 20, hidden_size: int = 8, **kwargs: Any) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


class ToyDecoder(PreTrainedModel):
    config_class = HeadsToyConfig

    def __init__(self, config: HeadsToyConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)
        self.calls: list[dict[str, Any]] = []

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value

    def forward(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> BaseModelOutputWithPast:
        self.calls.append(kwargs)
        hidden = torch.tanh(self.mix(self.embed_tokens(input_ids))).cumsum(1)  # depends on earlier tokens
        return BaseModelOutputWithPast(last_hidden_state=hidden)


class ToyPreTrained(PreTrainedModel):
    config_class = HeadsToyConfig
    base_model_prefix = "body"


class ToyForSequenceClassification(DecoderForSequenceClassification, ToyPreTrained):
    base_model_class: ClassVar[type[nn.Module]] = ToyDecoder
    decoder_attribute: ClassVar[str] = "body"
    decoder_call_kwargs: ClassVar[dict[str, Any]] = {"output_router_logits": False}


class ToyForCausalLM(DecoderForCausalLM, ToyPreTrained):
    base_model_class: ClassVar[type[nn.Module]] = ToyDecoder
    decoder_attribute: ClassVar[str] = "body"


def test_keep_logits_positions() -> None:
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    # exact: keep_logits_positions only indexes (the four below)
    assert torch.equal(keep_logits_positions(hidden, 0), hidden)
    assert torch.equal(keep_logits_positions(hidden, 2), hidden[:, 3:])
    assert torch.equal(keep_logits_positions(hidden, torch.tensor([0, 4])), hidden[:, [0, 4]])
    assert torch.equal(keep_logits_positions(hidden, -2), hidden[:, 2:])  # the reference drops the first two


def test_keep_logits_positions_per_row_and_by_mask() -> None:
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    per_row = keep_logits_positions(hidden, torch.tensor([[0, 4], [3, 1]]))
    # exact: indexing only (both checks below)
    assert torch.equal(per_row, torch.stack([hidden[0, [0, 4]], hidden[1, [3, 1]]]))
    mask = torch.tensor([[True, False, False, False, True], [False, True, True, True, False]])
    assert torch.equal(keep_logits_positions(hidden, mask), torch.stack([hidden[0, 0], hidden[0, 4], *hidden[1, 1:4]]))


def test_pool_last_tokens_left_and_right_padding_and_missing_pad_id() -> None:
    logits = torch.randn(2, 4, 3)
    ids = torch.tensor([[5, 6, 0, 0], [0, 7, 8, 9]])  # right-padded, left-padded (pad 0)
    pooled = pool_last_tokens(logits, ids, 0, "Toy")
    # exact: pool_last_tokens only indexes (both checks)
    assert torch.equal(pooled, torch.stack([logits[0, 1], logits[1, 3]]))
    with pytest.raises(InputError, match="Toy needs config.pad_token_id"):
        pool_last_tokens(logits, ids, None, "Toy")
    assert torch.equal(pool_last_tokens(logits[:1], ids[:1], None, "Toy"), logits[0, -1:])


def test_sequence_classification_mixin_builds_named_decoder_and_pools() -> None:
    torch.manual_seed(0)
    config = HeadsToyConfig(num_labels=3, pad_token_id=0)
    model = ToyForSequenceClassification(config).eval()
    assert sorted(model.state_dict()) == [
        "body.embed_tokens.weight",
        "body.mix.bias",
        "body.mix.weight",
        "score.weight",
    ]
    ids = torch.tensor([[5, 6, 0, 0], [3, 7, 8, 9]])
    out = model(ids, labels=torch.tensor([1, 2]))
    assert model.body.calls[-1]["output_router_logits"] is False
    hidden = model.body(ids).last_hidden_state
    expected = torch.stack([hidden[0, 1], hidden[1, 3]]) @ model.score.weight.T
    torch.testing.assert_close(out.logits, expected)
    assert out.loss is not None and out.loss.ndim == 0
    assert model.get_input_embeddings() is model.body.embed_tokens
    replacement = nn.Embedding(20, 8)
    model.set_input_embeddings(replacement)
    assert model.body.embed_tokens is replacement


def test_causal_lm_mixin_builds_head_and_accessors() -> None:
    model = ToyForCausalLM(HeadsToyConfig())
    assert model.vocab_size == 20 and model.get_output_embeddings() is model.lm_head
    assert model.lm_head.weight.shape == (20, 8) and model.lm_head.bias is None
    head = nn.Linear(8, 20, bias=False)
    model.set_output_embeddings(head)
    assert model.lm_head is head
    assert model.make_static_cache(6) is not None

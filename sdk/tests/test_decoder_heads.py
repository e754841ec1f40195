"""The shared decoder heads: logits_to_keep slicing, last-token pooling, and a toy head built on the mixins."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from microformers import PretrainedConfig, PreTrainedModel
from microformers.errors import InputError
from microformers_sdk.attention import get_attention_function
from microformers_sdk.cache import DynamicCache, StaticCache
from microformers_sdk.decoder_heads import (
    DecoderForCausalLM,
    DecoderForSequenceClassification,
    MoeDecoderForCausalLM,
    MoeDecoderModel,
    keep_logits_positions,
    pool_last_tokens,
)
from microformers_sdk.losses import causal_lm_loss, sequence_classification_loss
from microformers_sdk.masks import build_attention_mask, position_ids_from_attention_mask
from microformers_sdk.moe import load_balancing_loss
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


# From test_decoder_heads_full_mutants.py: ``microformers_sdk.decoder_heads`` behaviour the full mutation run found
# unasserted (docs/reliability.md). A toy mixture-of-experts decoder built on the mixins records what its layers and
# rotary embedding receive, so the layer loop's contract with a plugin (one mask per window, the rotary output, the
# cache, the attention function) and the heads' outputs (logits, losses, optional outputs, tuples) are checked
# against the SDK's own building blocks.


VOCAB, HIDDEN, EXPERTS = 20, 8, 4


class MoeToyConfig(PretrainedConfig):
    model_type = "decoder-heads-moe-toy"

    def __init__(
        self,
        windows: list[int | None] | None = None,
        dense_layers: list[int] | None = None,
        expert_count: int = EXPERTS,
        num_experts_per_tok: int = 2,
        router_aux_loss_coef: float = 0.25,
        output_router_logits: bool = False,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = VOCAB
        self.hidden_size = HIDDEN
        self.windows = [None, 2, None] if windows is None else windows
        self.dense_layers = [1] if dense_layers is None else dense_layers
        self.expert_count = expert_count
        self.num_experts_per_tok = num_experts_per_tok
        self.router_aux_loss_coef = router_aux_loss_coef
        self.output_router_logits = output_router_logits
        super().__init__(**kwargs)


class ToyAttention(nn.Module):
    def __init__(self, window: int | None) -> None:
        super().__init__()
        self.sliding_window = window


class ToyLayer(nn.Module):
    """Records its arguments; writes its input into the cache; returns attention weights filled with its index."""

    def __init__(self, config: MoeToyConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.self_attn = ToyAttention(config.windows[index])
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.router = None if index in config.dense_layers else nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.seen: list[dict[str, Any]] = []

    def forward(
        self, hidden: torch.Tensor, rotary: Any, mask: Any, cache: Any, attention_fn: Any, output_attentions: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        self.seen.append(
            {
                "hidden": hidden,
                "rotary": rotary,
                "mask": mask,
                "cache": cache,
                "fn": attention_fn,
                "attn": output_attentions,
            }
        )
        batch, length, _ = hidden.shape
        if cache is not None:
            cache.update(hidden[:, None], hidden[:, None], self.index)
        out = hidden + torch.tanh(self.proj(hidden)).cumsum(1)
        weights = torch.full((batch, 1, length, length), float(self.index)) if output_attentions else None
        routed = None if self.router is None else self.router(hidden).reshape(-1, EXPERTS)
        return out, weights, routed


class ToyRotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch.Tensor, torch.dtype | None]] = []

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[str, int]:
        self.calls.append((position_ids, dtype))
        return ("rotary", len(self.calls))


class ToyMoePreTrained(PreTrainedModel):
    config_class = MoeToyConfig
    base_model_prefix = "model"


class ToyMoeModel(MoeDecoderModel, ToyMoePreTrained):
    def __init__(self, config: MoeToyConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(ToyLayer(config, i) for i in range(len(config.windows)))
        self.norm = nn.LayerNorm(HIDDEN)
        self.rotary_emb = ToyRotary()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value


class ToyMoeForCausalLM(MoeDecoderForCausalLM, ToyMoePreTrained):
    base_model_class: ClassVar[type[nn.Module]] = ToyMoeModel
    num_experts_attribute: ClassVar[str] = "expert_count"


class ToyMoeForSequenceClassification(DecoderForSequenceClassification, ToyMoePreTrained):
    base_model_class: ClassVar[type[nn.Module]] = ToyMoeModel


def _config(**kwargs: Any) -> MoeToyConfig:
    config = MoeToyConfig(**kwargs)
    config._attn_implementation = "eager"
    return config


def _same_mask(got: Any, expected: Any) -> bool:
    (got_mask, got_causal), (want_mask, want_causal) = got, expected
    if got_causal != want_causal or (got_mask is None) != (want_mask is None):
        return False
    # exact: the same mask-building code on the same inputs
    return got_mask is None or torch.equal(got_mask, want_mask)


IDS = torch.tensor([[0, 3, 4, 5, 6], [7, 8, 9, 10, 11]])


MASK = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])


def test_each_layer_gets_its_window_mask_the_rotary_output_the_cache_and_the_attention_function() -> None:
    torch.manual_seed(0)
    config = _config()
    model = ToyMoeModel(config).double().eval()
    with torch.no_grad():
        out = model(IDS, attention_mask=MASK, use_cache=True)
    cache = out.past_key_values
    assert isinstance(cache, DynamicCache) and cache.get_seq_length() == 5
    (positions, dtype), *more = model.rotary_emb.calls
    assert not more and dtype == torch.float64
    assert torch.equal(positions, position_ids_from_attention_mask(MASK, 0, 5))
    for layer in model.layers:
        seen = layer.seen[-1]
        expected = build_attention_mask(MASK, 5, 0, sliding_window=layer.self_attn.sliding_window)
        assert _same_mask(seen["mask"], expected), layer.index
        assert seen["rotary"] == ("rotary", 1) and seen["cache"] is cache and seen["attn"] is False
        assert seen["fn"] is get_attention_function(config)
    # one new token after the cached five: the masks know the past length (the window of 2 is now in reach)
    longer = torch.cat((MASK, torch.ones(2, 1, dtype=MASK.dtype)), 1)
    with torch.no_grad():
        model(torch.tensor([[12], [13]]), attention_mask=longer, past_key_values=cache, output_attentions=True)
    assert torch.equal(model.rotary_emb.calls[-1][0], position_ids_from_attention_mask(longer, 5, 1))
    for layer in model.layers:
        expected = build_attention_mask(longer, 1, 5, sliding_window=layer.self_attn.sliding_window)
        assert _same_mask(layer.seen[-1]["mask"], expected), layer.index
        assert layer.seen[-1]["attn"] is True
    assert layer.seen[-1]["mask"][0] is not None  # the windowed layer's mask differs from the full one
    assert not torch.equal(model.layers[1].seen[-1]["mask"][0], model.layers[0].seen[-1]["mask"][0])
    assert cache.get_seq_length() == 6


def test_model_outputs_only_what_is_asked_for() -> None:
    torch.manual_seed(0)
    model = ToyMoeModel(_config()).eval()
    with torch.no_grad():
        plain = model(IDS)
        full = model(IDS, output_hidden_states=True, output_attentions=True, output_router_logits=True)
        no_cache = model(IDS, use_cache=False)
    assert (plain.hidden_states, plain.attentions, plain.router_logits) == (None, None, None)
    assert isinstance(plain.past_key_values, DynamicCache) and no_cache.past_key_values is None
    assert model.layers[0].seen[-1]["cache"] is None
    torch.testing.assert_close(full.last_hidden_state, plain.last_hidden_state)
    layers_in = [layer.seen[1]["hidden"] for layer in model.layers]
    assert len(full.hidden_states) == 4
    for got, expected in zip(full.hidden_states, [model.embed_tokens(IDS), *layers_in[1:]], strict=False):
        torch.testing.assert_close(got, expected)
    torch.testing.assert_close(full.hidden_states[-1], full.last_hidden_state)
    last_out = layers_in[2] + torch.tanh(model.layers[2].proj(layers_in[2])).cumsum(1)
    torch.testing.assert_close(full.last_hidden_state, model.norm(last_out))
    assert [float(w.flatten()[0]) for w in full.attentions] == [0.0, 1.0, 2.0]
    # the dense layer routes nothing: one router tensor per routed layer
    assert len(full.router_logits) == 2 and full.router_logits[0].shape == (10, EXPERTS)
    torch.testing.assert_close(full.router_logits[1], model.layers[2].router(layers_in[2]).reshape(-1, EXPERTS))
    as_tuple = model(IDS, output_router_logits=True, use_cache=False, return_dict=False)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2  # last hidden state and router logits
    torch.testing.assert_close(as_tuple[0], plain.last_hidden_state)


def test_router_logits_follow_the_config_unless_given() -> None:
    torch.manual_seed(0)
    model = ToyMoeModel(_config(output_router_logits=True)).eval()
    with torch.no_grad():
        assert len(model(IDS).router_logits) == 2
        assert model(IDS, output_router_logits=False).router_logits is None
        by_embeds = model(inputs_embeds=model.embed_tokens(IDS))
        torch.testing.assert_close(by_embeds.last_hidden_state, model(IDS).last_hidden_state)
        given = torch.tensor([[3, 1, 4, 1, 5]])
        model(IDS[:1], position_ids=given)
    assert torch.equal(model.rotary_emb.calls[-1][0], given)


def test_causal_lm_logits_losses_and_aux_loss() -> None:
    torch.manual_seed(0)
    config = _config()
    model = ToyMoeForCausalLM(config).eval()
    assert isinstance(model.model, ToyMoeModel) and model.vocab_size == VOCAB
    assert model.lm_head.weight.shape == (VOCAB, HIDDEN) and model.lm_head.bias is None
    labels = torch.tensor([[-100, 3, 4, 5, 6], [7, 8, 9, 10, 11]])
    with torch.no_grad():
        decoded = model.model(IDS, attention_mask=MASK, output_router_logits=True)
        out = model(IDS, attention_mask=MASK, labels=labels, output_router_logits=True)
        summed = model(IDS, attention_mask=MASK, labels=labels, num_items_in_batch=4)
        last = model(IDS, logits_to_keep=1)
    logits = model.lm_head(decoded.last_hidden_state)
    torch.testing.assert_close(out.logits, logits)
    torch.testing.assert_close(last.logits, logits[:, -1:])
    aux = load_balancing_loss(decoded.router_logits, EXPERTS, 2, MASK)
    torch.testing.assert_close(out.aux_loss, aux)
    torch.testing.assert_close(out.loss, causal_lm_loss(logits, labels) + 0.25 * aux)
    torch.testing.assert_close(summed.loss, causal_lm_loss(logits, labels, 4))
    assert summed.aux_loss is None and summed.router_logits is None
    assert len(out.router_logits) == 2 and isinstance(out.past_key_values, DynamicCache)


def test_causal_lm_reads_router_logits_and_return_dict_from_the_config() -> None:
    torch.manual_seed(0)
    model = ToyMoeForCausalLM(_config(output_router_logits=True, return_dict=False)).eval()
    with torch.no_grad():
        as_tuple = model(IDS, use_cache=False)  # logits, aux loss, router logits
        as_output = model(IDS, use_cache=False, return_dict=True)
        no_aux = model(IDS, labels=IDS, output_router_logits=False, return_dict=True)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 3
    torch.testing.assert_close(as_tuple[0], as_output.aux_loss)
    torch.testing.assert_close(as_tuple[1], as_output.logits)
    assert as_output.aux_loss is not None and len(as_output.router_logits) == 2
    assert no_aux.aux_loss is None and no_aux.router_logits is None
    torch.testing.assert_close(no_aux.loss, causal_lm_loss(no_aux.logits, IDS))


def test_causal_lm_passes_every_input_to_the_decoder() -> None:
    torch.manual_seed(0)
    model = ToyMoeForCausalLM(_config()).eval()
    decoder = model.model
    with torch.no_grad():
        first = model(IDS, attention_mask=MASK)
        embeds = decoder.embed_tokens(torch.tensor([[12], [13]]))
        longer = torch.cat((MASK, torch.ones(2, 1, dtype=MASK.dtype)), 1)
        step = model(
            inputs_embeds=embeds,
            attention_mask=longer,
            position_ids=torch.tensor([[7], [9]]),
            past_key_values=first.past_key_values,
            output_attentions=True,
            output_hidden_states=True,
        )
        no_cache = model(IDS, use_cache=False)
    seen = decoder.layers[1].seen[-2]  # the step's call (the last one is the uncached run)
    assert _same_mask(seen["mask"], build_attention_mask(longer, 1, 5, sliding_window=2))
    assert torch.equal(decoder.rotary_emb.calls[-2][0], torch.tensor([[7], [9]]))
    # exact: the embeddings are handed on as they are
    assert torch.equal(decoder.layers[0].seen[-2]["hidden"], embeds) and seen["attn"] is True
    assert step.past_key_values is first.past_key_values and first.past_key_values.get_seq_length() == 6
    assert len(step.hidden_states) == 4 and len(step.attentions) == 3
    assert no_cache.past_key_values is None and no_cache.hidden_states is None and no_cache.attentions is None


def test_sequence_classification_pools_passes_inputs_and_returns_tuples() -> None:
    torch.manual_seed(0)
    config = _config(num_labels=3, pad_token_id=0, output_router_logits=True)
    model = ToyMoeForSequenceClassification(config).eval()
    assert model.num_labels == 3 and model.score.weight.shape == (3, HIDDEN) and model.score.bias is None
    ids = torch.tensor([[5, 6, 0, 0], [3, 7, 8, 9]])
    labels = torch.tensor([1, 2])
    with torch.no_grad():
        hidden = model.model(ids, output_router_logits=False).last_hidden_state
        out = model(ids, labels=labels, output_attentions=True, output_hidden_states=True)
        bare = model(ids, use_cache=False, return_dict=False)
    expected = model.score(torch.stack([hidden[0, 1], hidden[1, 3]]))
    torch.testing.assert_close(out.logits, expected)
    torch.testing.assert_close(out.loss, sequence_classification_loss(expected, labels, config))
    assert len(out.hidden_states) == 4 and len(out.attentions) == 3
    assert isinstance(out.past_key_values, DynamicCache)
    assert isinstance(bare, tuple) and len(bare) == 1  # only the pooled logits: no cache, no loss
    torch.testing.assert_close(bare[0], expected)
    with torch.no_grad():
        embeds = model.model.embed_tokens(ids)
        by_embeds = model(
            inputs_embeds=embeds, attention_mask=torch.ones(2, 4), position_ids=torch.tensor([[0, 1, 2, 3]])
        )
    assert torch.equal(model.model.rotary_emb.calls[-1][0], torch.tensor([[0, 1, 2, 3]]))
    assert by_embeds.logits.shape == (2, 3)  # without input ids padding cannot be seen: the last position
    torch.testing.assert_close(by_embeds.logits[1], expected[1])


def test_sequence_classification_return_dict_from_the_config() -> None:
    torch.manual_seed(0)
    model = ToyMoeForSequenceClassification(_config(num_labels=2, pad_token_id=0, return_dict=False)).eval()
    with torch.no_grad():
        out = model(torch.tensor([[4, 5, 0]]), use_cache=False)
        kept = model(torch.tensor([[4, 5, 0]]), use_cache=False, return_dict=True)
    assert isinstance(out, tuple) and len(out) == 1
    torch.testing.assert_close(out[0], kept.logits)


def test_static_cache_for_the_model() -> None:
    model = ToyMoeForCausalLM(_config())
    cache = model.make_static_cache(6)
    assert isinstance(cache, StaticCache) and cache.max_cache_len == 6 and cache.config is model.config


def test_keep_logits_positions_one_and_all() -> None:
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    # exact: keep_logits_positions only indexes (the three below)
    assert torch.equal(keep_logits_positions(hidden, 1), hidden[:, 4:])
    assert torch.equal(keep_logits_positions(hidden, 5), hidden)
    assert torch.equal(keep_logits_positions(hidden, torch.tensor([1])), hidden[:, [1]])


def test_pooling_without_pad_id_or_ids() -> None:
    logits = torch.randn(2, 4, 3)
    with pytest.raises(InputError) as info:
        pool_last_tokens(logits, None, None, "ToyModel")
    assert str(info.value) == (
        "ToyModel needs config.pad_token_id to find the last token of each row in a batch of 2; "
        "set model.config.pad_token_id (e.g. to the tokenizer's pad_token_id)"
    )
    # exact: pool_last_tokens only indexes (the checks below)
    assert torch.equal(pool_last_tokens(logits, None, 0, "ToyModel"), logits[:, -1])
    assert torch.equal(pool_last_tokens(logits[:1], torch.tensor([[1, 2, 0, 0]]), None, "ToyModel"), logits[:1, -1])
    three = torch.randn(3, 2, 1)
    assert torch.equal(
        pool_last_tokens(three, torch.tensor([[1, 0], [1, 1], [0, 1]]), 0, "T"), three[[0, 1, 2], [0, 1, 1]]
    )


def test_no_cache_is_returned_without_use_cache_even_when_one_is_given() -> None:
    torch.manual_seed(0)
    model = ToyMoeModel(_config()).eval()
    with torch.no_grad():
        out = model(IDS, past_key_values=DynamicCache(), use_cache=False)
    assert out.past_key_values is None


def test_sequence_classification_passes_the_mask_and_cache_and_names_itself() -> None:
    torch.manual_seed(0)
    model = ToyMoeForSequenceClassification(_config(num_labels=2, pad_token_id=0)).eval()
    with torch.no_grad():
        first = model(IDS, attention_mask=MASK)
        seen = model.model.layers[1].seen[-1]
        assert _same_mask(seen["mask"], build_attention_mask(MASK, 5, 0, sliding_window=2))
        longer = torch.cat((MASK, torch.ones(2, 1, dtype=MASK.dtype)), 1)
        step = model(torch.tensor([[12], [13]]), attention_mask=longer, past_key_values=first.past_key_values)
    assert step.past_key_values is first.past_key_values and first.past_key_values.get_seq_length() == 6
    assert _same_mask(model.model.layers[1].seen[-1]["mask"], build_attention_mask(longer, 1, 5, sliding_window=2))
    model.config.pad_token_id = None
    with pytest.raises(InputError, match=r"^ToyMoeForSequenceClassification needs config\.pad_token_id"):
        model(IDS)

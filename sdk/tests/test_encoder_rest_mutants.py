"""``microformers_sdk.encoder`` behaviour the seventh mutation pass found unasserted (docs/reliability.md).

The mutants of the encoder's layers, embeddings and base model ``forward`` that the full run left: attention
dropout only in training (also in the returned attention probabilities), every post-norm block using the
configured ``layer_norm_eps``, and a base model mixed in without an ``input_error`` of its own raising the SDK's
``InputError``. A tiny BERT-style family is built from the SDK's mixins the way a plugin builds one.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import microformers.modeling
import microformers.plugins
from microformers import PretrainedConfig, PreTrainedModel
from microformers.errors import InputError
from microformers.plugins import Registry
from microformers_sdk.attention import sdpa_attention
from microformers_sdk.encoder import (
    EncoderEmbeddings,
    EncoderLayer,
    EncoderModelMixin,
    EncoderPreTrainedMixin,
    EncoderSelfAttention,
)

SETTINGS: dict[str, Any] = {
    "vocab_size": 30,
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 12,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 10,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
}


class RestConfig(PretrainedConfig):
    model_type = "encoder-rest-mutants-toy"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**SETTINGS, **kwargs})


def build_embeddings(config: RestConfig) -> EncoderEmbeddings:
    return EncoderEmbeddings(
        config.vocab_size, config.hidden_size, config.max_position_embeddings, config.type_vocab_size,
        config.layer_norm_eps, config.hidden_dropout_prob, config.pad_token_id,
    )  # fmt: skip


class RestPreTrained(EncoderPreTrainedMixin, PreTrainedModel):
    config_class = RestConfig
    base_model_prefix = "rest"


class RestModel(EncoderModelMixin, RestPreTrained):
    def __init__(self, config: RestConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self._build_encoder(build_embeddings(config), add_pooling_layer)
        self.post_init()


class BareModel(EncoderModelMixin, PreTrainedModel):
    """A base model mixed straight into ``PreTrainedModel``: no ``input_error`` of its own."""

    config_class = RestConfig
    base_model_prefix = "bare"

    def __init__(self, config: RestConfig) -> None:
        super().__init__(config)
        self._build_encoder(build_embeddings(config), add_pooling_layer=False)
        self.post_init()


def rest_model(**settings: Any) -> RestModel:
    torch.manual_seed(0)
    return RestModel(RestConfig(**settings)).eval()


IDS = torch.tensor([[2, 7, 9, 4, 11, 3], [2, 5, 8, 3, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])


@pytest.mark.parametrize("output_attentions", [False, True])
def test_attention_dropout_is_off_outside_training(output_attentions: bool) -> None:
    dropped = rest_model(attention_probs_dropout_prob=0.5)
    plain = rest_model()  # the same weights: dropout draws no parameters
    with torch.no_grad():
        first = dropped(IDS, attention_mask=MASK, output_attentions=output_attentions)
        second = dropped(IDS, attention_mask=MASK, output_attentions=output_attentions)
        expected = plain(IDS, attention_mask=MASK, output_attentions=output_attentions)
    torch.testing.assert_close(first.last_hidden_state, expected.last_hidden_state)
    torch.testing.assert_close(second.last_hidden_state, expected.last_hidden_state)
    if output_attentions:
        torch.testing.assert_close(first.attentions[0], expected.attentions[0])


def test_returned_attention_probabilities_carry_the_dropout_in_training() -> None:
    model = rest_model(attention_probs_dropout_prob=0.5)
    with torch.no_grad():
        evaluated = model(IDS, attention_mask=MASK, output_attentions=True).attentions[0]
        model.train()
        torch.manual_seed(1)
        trained = model(IDS, attention_mask=MASK, output_attentions=True).attentions[0]
    # the first layer sees the same embeddings (no hidden dropout): each probability is dropped or doubled
    dropped = trained == 0
    assert dropped.any() and (evaluated[dropped] > 0).any()
    torch.testing.assert_close(trained[~dropped], 2 * evaluated[~dropped])


def test_every_residual_block_normalises_with_the_configured_epsilon() -> None:
    model = rest_model(layer_norm_eps=0.5)
    torch.manual_seed(2)
    for layer in model.encoder.layer:
        for block, width in ((layer.attention.output, 8), (layer.output, 12)):
            hidden, residual = torch.randn(2, 3, width), torch.randn(2, 3, 8)
            norm = block.LayerNorm
            expected = F.layer_norm(block.dense(hidden) + residual, (8,), norm.weight, norm.bias, eps=0.5)
            with torch.no_grad():
                torch.testing.assert_close(block(hidden, residual), expected)
    assert {module.eps for module in model.modules() if isinstance(module, nn.LayerNorm)} == {0.5}


def test_a_base_model_without_its_own_input_error_raises_the_sdks() -> None:
    torch.manual_seed(0)
    model = BareModel(RestConfig()).eval()
    with pytest.raises(InputError, match="BareModel.forward needs exactly one of input_ids or inputs_embeds"):
        model()
    with pytest.raises(InputError, match="attention_mask has 5 columns but the input has 6 tokens"):
        model(IDS, attention_mask=torch.ones(2, 5))
    with torch.no_grad():
        out = model(IDS, attention_mask=MASK)
    assert out.last_hidden_state.shape == (2, 6, 8) and out.pooler_output is None


def test_an_input_longer_than_the_position_table_says_how_to_truncate() -> None:
    message = (
        "the input has 11 tokens but this model has max_position_embeddings=10; "
        "truncate the input (e.g. tokenizer(..., truncation=True, max_length=...))"
    )
    with pytest.raises(InputError) as raised:
        rest_model()(torch.full((1, 11), 5))
    assert str(raised.value) == message


def test_a_float32_head_mask_keeps_a_bfloat16_model_in_bfloat16() -> None:
    model = rest_model().to(torch.bfloat16)
    with torch.no_grad():
        masked = model(IDS, attention_mask=MASK, head_mask=torch.tensor([1.0, 0.0]), output_attentions=True)
        plain = model(IDS, attention_mask=MASK, output_attentions=True)
    assert masked.last_hidden_state.dtype == torch.bfloat16 and masked.attentions[0].dtype == torch.bfloat16
    assert torch.all(masked.attentions[0][:, 1] == 0)
    torch.testing.assert_close(masked.attentions[0][:, 0], plain.attentions[0][:, 0])


class TaggedLayer(EncoderLayer):
    """A plugin's own layer class (BERT names its ``BertLayer``)."""


class TaggedModel(EncoderModelMixin, RestPreTrained):
    def __init__(self, config: RestConfig) -> None:
        super().__init__(config)
        self._build_encoder(build_embeddings(config), add_pooling_layer=False, layer_class=TaggedLayer)
        self.post_init()


def test_the_encoder_is_built_from_the_plugins_layer_class() -> None:
    model = TaggedModel(RestConfig(num_hidden_layers=3))
    assert [type(layer) for layer in model.encoder.layer] == [TaggedLayer] * 3


def test_token_types_refused_by_a_model_without_them_with_the_exact_message() -> None:
    with pytest.raises(InputError) as raised:
        rest_model(type_vocab_size=0)(IDS, token_type_ids=torch.zeros(2, 6, dtype=torch.long))
    assert str(raised.value) == "this model has no token type embeddings; do not pass token_type_ids"


class CountingEmbeddings(EncoderEmbeddings):
    """Positions counted over the real tokens of ``input_ids`` (pad id 0), as RoBERTa counts from its pad."""

    def default_position_ids(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor) -> torch.Tensor:
        assert input_ids is not None
        real = (input_ids != 0).long()
        return real.cumsum(1) * real


def test_default_position_ids_are_made_from_the_input_ids() -> None:
    torch.manual_seed(0)
    embeddings = CountingEmbeddings(30, 8, 10, 2, 1e-12, 0.0, 0).eval()
    expected_positions = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 0, 0]])
    with torch.no_grad():
        by_default = embeddings(IDS, None, None, None)
        explicit = embeddings(IDS, None, expected_positions, None)
    torch.testing.assert_close(by_default, explicit)


def test_the_layers_use_the_configured_attention_implementation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []

    def counting(query: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(tuple(query.shape))
        return sdpa_attention(query, *args, **kwargs)

    registry = Registry()
    registry.add("attention", "counting", counting)
    monkeypatch.setattr(microformers.plugins, "registry", registry)
    monkeypatch.setattr(microformers.modeling, "registry", registry)
    model = rest_model(attn_implementation="counting")
    with torch.no_grad():
        out = model(IDS, attention_mask=MASK)
    assert calls == [(2, 2, 6, 4), (2, 2, 6, 4)]
    torch.testing.assert_close(out.last_hidden_state, rest_model()(IDS, attention_mask=MASK).last_hidden_state)


def test_an_own_output_projection_is_applied_to_the_merged_heads() -> None:
    torch.manual_seed(0)
    with_output = EncoderSelfAttention(8, 2, 0.0, names=("q_proj", "k_proj", "v_proj"), output="out_proj")
    without = EncoderSelfAttention(8, 2, 0.0, names=("q_proj", "k_proj", "v_proj"))
    without.load_state_dict({k: v for k, v in with_output.state_dict().items() if not k.startswith("out_proj")})
    hidden = torch.randn(2, 3, 8)
    with torch.no_grad():
        projected, _ = with_output(hidden, None, sdpa_attention, False)
        merged, _ = without(hidden, None, sdpa_attention, False)
        torch.testing.assert_close(projected, with_output.out_proj(merged))
    assert not hasattr(without, "out_proj") and without.output_name is None


def test_a_single_segment_vocabulary_keeps_its_token_type_embedding() -> None:
    model = rest_model(type_vocab_size=1)
    assert model.embeddings.token_type_embeddings.num_embeddings == 1
    with torch.no_grad():
        default = model(IDS).last_hidden_state
        zeros = model(IDS, token_type_ids=torch.zeros(2, 6, dtype=torch.long)).last_hidden_state
    torch.testing.assert_close(default, zeros)

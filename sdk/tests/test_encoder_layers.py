"""``microformers_sdk.encoder``: a tiny BERT-style family built from the SDK's mixins the way a plugin builds one;
its layers, embeddings, base model ``forward`` and heads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

import microformers.modeling
import microformers.plugins
from microformers import PretrainedConfig, PreTrainedModel
from microformers.errors import ConfigError, InputError
from microformers.plugins import Registry
from microformers_sdk.attention import get_attention_function, sdpa_attention
from microformers_sdk.encoder import (
    EncoderEmbeddings,
    EncoderForMaskedLM,
    EncoderForQuestionAnswering,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
    EncoderLayer,
    EncoderModelMixin,
    EncoderPreTrainedMixin,
    EncoderSelfAttention,
    layer_head_masks,
    mirror_output_bias,
    run_encoder,
)
from microformers_sdk.testing import assert_close
from microformers_sdk.weights import KeyRenamer

# From test_encoder_full_mutants.py: ``microformers_sdk.encoder`` behaviour the full mutation run found unasserted
# (docs/reliability.md). A tiny BERT-style family is built from the SDK's mixins the way a plugin builds one (same
# parameter names as BERT), so its numbers are checked against ``transformers``' BERT (an oracle only) with the same
# weights, and its errors, head pruning, head masks and heads are checked through the public ``forward`` /
# ``prune_heads``.


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
    "classifier_dropout": None,
    "pad_token_id": 0,
}


class ToyConfig(PretrainedConfig):
    model_type = "encoder-full-mutants-toy"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**SETTINGS, **kwargs})


class ToyInputError(InputError):
    """The toy family's own input error."""


class ToyPreTrained(EncoderPreTrainedMixin, PreTrainedModel):
    config_class = ToyConfig
    base_model_prefix = "toy"
    input_error = ToyInputError


class ToyModel(EncoderModelMixin, ToyPreTrained):
    def __init__(self, config: ToyConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        embeddings = EncoderEmbeddings(
            config.vocab_size, config.hidden_size, config.max_position_embeddings, config.type_vocab_size,
            config.layer_norm_eps, config.hidden_dropout_prob, config.pad_token_id, error=ToyInputError,
        )  # fmt: skip
        self._build_encoder(embeddings, add_pooling_layer)
        self.post_init()


ToyPreTrained.base_model_class = ToyModel


class ToyLMHead(nn.Module):
    """BERT's layout: ``decoder`` (weight and bias) plus the same bias again as ``bias``."""

    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(hidden_states)


class ToyForMaskedLM(EncoderForMaskedLM, ToyPreTrained):
    legacy_names = KeyRenamer([(r"LayerNorm\.gamma$", "LayerNorm.weight"), (r"LayerNorm\.beta$", "LayerNorm.bias")])

    def __init__(self, config: ToyConfig) -> None:
        super().__init__(config)
        self.toy = ToyModel(config, add_pooling_layer=False)
        self.lm_head = ToyLMHead(config)
        self.post_init()

    def _mlm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden_states)


class ToyForSequenceClassification(EncoderForSequenceClassification, ToyPreTrained):
    def __init__(self, config: ToyConfig) -> None:
        super().__init__(config)
        self.toy = self._backbone()  # with the pooler
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _logits(self, encoded: Any) -> torch.Tensor:
        return self.classifier(encoded.pooler_output)


class ToyForTokenClassification(EncoderForTokenClassification, ToyPreTrained):
    pass


class ToyForQuestionAnswering(EncoderForQuestionAnswering, ToyPreTrained):
    pass


def toy(cls: type = ToyModel, **settings: Any) -> Any:
    torch.manual_seed(0)
    return cls(ToyConfig(**settings)).eval()


IDS = torch.tensor([[2, 7, 9, 4, 11, 3], [2, 5, 8, 3, 0, 0]])


MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])


SEGMENTS = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])


# -- the base model against transformers' BERT -------------------------------------------------------------
def test_base_model_matches_the_reference_bert_with_the_same_weights() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    reference_config = transformers.BertConfig(**SETTINGS, attn_implementation="eager")
    reference = transformers.BertModel(reference_config).eval()
    model = ToyModel(ToyConfig())
    missing, unexpected = model.load_state_dict(reference.state_dict(), strict=False)
    assert missing == [] and set(unexpected) <= {"embeddings.position_ids", "embeddings.token_type_ids"}
    model.eval()
    with torch.no_grad():
        ours = model(
            IDS, attention_mask=MASK, token_type_ids=SEGMENTS, output_hidden_states=True, output_attentions=True
        )
        theirs = reference(
            IDS, attention_mask=MASK, token_type_ids=SEGMENTS, output_hidden_states=True, output_attentions=True
        )
    torch.testing.assert_close(ours.last_hidden_state, theirs.last_hidden_state)
    torch.testing.assert_close(ours.pooler_output, theirs.pooler_output)
    assert len(ours.hidden_states) == 3 and len(ours.attentions) == 2
    for mine, reference_state in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        torch.testing.assert_close(mine, reference_state)
    for mine, reference_weights in zip(ours.attentions, theirs.attentions, strict=True):
        torch.testing.assert_close(mine, reference_weights)


def test_tuple_output_and_config_defaults_for_optional_outputs() -> None:
    model = toy(output_hidden_states=True, output_attentions=True, return_dict=False)
    with torch.no_grad():
        last, pooled, hidden, attentions = model(IDS)
    assert last.shape == (2, 6, 8) and pooled.shape == (2, 8)
    assert len(hidden) == 3 and len(attentions) == 2 and attentions[0].shape == (2, 2, 6, 6)
    with torch.no_grad():
        plain = model(IDS, output_hidden_states=False, output_attentions=False, return_dict=True)
    assert plain.hidden_states is None and plain.attentions is None
    torch.testing.assert_close(plain.last_hidden_state, last)


# -- input errors: the plugin's error class, messages that name the argument -------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "ToyModel.forward needs exactly one of input_ids or inputs_embeds"),
        ({"input_ids": IDS, "inputs_embeds": torch.zeros(2, 6, 8)}, "needs exactly one of input_ids or inputs_embeds"),
        ({"input_ids": torch.full((1, 11), 5)}, r"the input has 11 tokens but this model has max_position_embeddings=10; truncate"),
        ({"input_ids": IDS, "position_ids": torch.tensor([[0, 1, 2, 3, 4, 10]])}, r"position_ids must lie in \[0, 10\) \(max_position_embeddings\)"),
        ({"input_ids": IDS, "position_ids": torch.tensor([[-1, 1, 2, 3, 4, 5]])}, r"position_ids must lie in \[0, 10\)"),
        ({"input_ids": IDS, "token_type_ids": torch.zeros(2, 5, dtype=torch.long)},
         r"token_type_ids has shape \(2, 5\) but the input is \(2, 6\); pass one segment id per token"),
        ({"input_ids": IDS, "token_type_ids": torch.full((2, 6), 2)},
         r"token_type_ids must lie in \[0, 2\) \(type_vocab_size\); this model has no embedding for a higher segment id"),
        ({"input_ids": IDS, "attention_mask": torch.ones(2, 5)},
         "attention_mask has 5 columns but the input has 6 tokens; pass the mask the tokenizer returned"),
        ({"input_ids": IDS, "head_mask": torch.ones(3)},
         r"head_mask has shape \(3,\); pass \(2,\) for every layer or \(2, 2\), 1.0 to keep a head and 0.0 to mask it"),
        ({"input_ids": IDS, "head_mask": torch.ones(3, 2)}, r"head_mask has shape \(3, 2\)"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_the_plugins_input_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ToyInputError, match=message):
        toy()(**kwargs)


def test_the_longest_input_and_the_last_position_fit() -> None:
    model = toy()
    with torch.no_grad():
        out = model(torch.full((1, 10), 5), position_ids=torch.arange(10).unsqueeze(0))
        default = model(torch.full((1, 10), 5))
    torch.testing.assert_close(out.last_hidden_state, default.last_hidden_state)
    with torch.no_grad():
        highest_segment = model(IDS, token_type_ids=torch.ones(2, 6, dtype=torch.long))
    assert highest_segment.last_hidden_state.shape == (2, 6, 8)


def test_token_types_default_to_zero_and_models_without_them_refuse_them() -> None:
    model = toy()
    with torch.no_grad():
        default = model(IDS).last_hidden_state
        zeros = model(IDS, token_type_ids=torch.zeros(2, 6, dtype=torch.long)).last_hidden_state
        ones = model(IDS, token_type_ids=torch.ones(2, 6, dtype=torch.long)).last_hidden_state
    torch.testing.assert_close(default, zeros)
    assert not torch.allclose(default, ones)
    untyped = toy(type_vocab_size=0)
    assert not hasattr(untyped.embeddings, "token_type_embeddings")
    with pytest.raises(ToyInputError, match="this model has no token type embeddings; do not pass token_type_ids"):
        untyped(IDS, token_type_ids=torch.zeros(2, 6, dtype=torch.long))
    with torch.no_grad():
        assert untyped(IDS).last_hidden_state.shape == (2, 6, 8)


def test_inputs_embeds_give_the_same_result_as_input_ids() -> None:
    model = toy()
    with torch.no_grad():
        from_ids = model(IDS, attention_mask=MASK).last_hidden_state
        from_embeds = model(inputs_embeds=model.get_input_embeddings()(IDS), attention_mask=MASK).last_hidden_state
    torch.testing.assert_close(from_ids, from_embeds)


@pytest.mark.parametrize(("pad", "expected"), [(0, 0), (29, 29), (30, None), (-1, None), (None, None), ("0", None)])
def test_padding_index_is_the_pad_token_when_it_is_a_vocabulary_id(pad: Any, expected: int | None) -> None:
    embeddings = EncoderEmbeddings(30, 8, 10, 2, 1e-12, 0.0, pad)
    assert embeddings.word_embeddings.padding_idx == expected


def test_embeddings_normalise_with_the_given_epsilon_and_drop_out_in_training() -> None:
    embeddings = EncoderEmbeddings(30, 8, 10, 2, 1e-3, 0.5)
    assert embeddings.LayerNorm.eps == 1e-3 and embeddings.dropout.p == 0.5
    assert embeddings.position_embeddings.num_embeddings == 10 and embeddings.token_type_embeddings.num_embeddings == 2
    assert embeddings.word_embeddings.embedding_dim == 8 and embeddings.error is InputError


# -- head masks and head pruning -------------------------------------------------------------------------
def test_layer_head_masks_expand_one_row_to_every_layer() -> None:
    assert layer_head_masks(None, 3, 2) == [None, None, None]
    every = layer_head_masks([1.0, 0.0], 3, 2)
    # exact: the given head masks, copied (both checks)
    assert len(every) == 3 and all(row.tolist() == [1.0, 0.0] for row in every)
    per_layer = layer_head_masks(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), 3, 2)
    assert [row.tolist() for row in per_layer] == [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    with pytest.raises(ToyInputError, match=r"head_mask has shape \(2, 2\); pass \(2,\) for every layer or \(3, 2\)"):
        layer_head_masks(torch.ones(2, 2), 3, 2, ToyInputError)
    with pytest.raises(InputError, match=r"head_mask has shape \(3,\)"):
        layer_head_masks(torch.ones(3), 3, 2)


def test_a_masked_head_is_silenced_in_output_and_attentions_like_a_pruned_one() -> None:
    model = toy()
    with torch.no_grad():
        full = model(IDS, attention_mask=MASK, output_attentions=True)
        masked = model(
            IDS, attention_mask=MASK, output_attentions=True, head_mask=torch.tensor([[1.0, 0.0], [1.0, 1.0]])
        )
        half = model(IDS, attention_mask=MASK, head_mask=torch.tensor([0.5, 1.0])).last_hidden_state
    assert torch.all(masked.attentions[0][:, 1] == 0) and torch.allclose(
        masked.attentions[0][:, 0], full.attentions[0][:, 0]
    )
    torch.testing.assert_close(masked.attentions[1].sum(-1), torch.ones(2, 2, 6))
    assert not torch.allclose(half, full.last_hidden_state) and not torch.allclose(half, masked.last_hidden_state)
    model.prune_heads({0: [1]})
    with torch.no_grad():
        pruned = model(IDS, attention_mask=MASK, output_attentions=True)
        # a head mask names the original heads: head 0 of the pruned layer is still original head 0
        pruned_masked = model(IDS, attention_mask=MASK, head_mask=torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    torch.testing.assert_close(pruned.last_hidden_state, masked.last_hidden_state)
    torch.testing.assert_close(pruned_masked.last_hidden_state, masked.last_hidden_state)
    assert pruned.attentions[0].shape == (2, 1, 6, 6) and pruned.attentions[1].shape == (2, 2, 6, 6)


def test_pruning_records_heads_in_the_config_and_a_config_with_pruned_heads_builds_pruned() -> None:
    model = toy()
    model.prune_heads({1: [0]})
    model.prune_heads({"1": [1], 0: [0]})
    assert model.config.pruned_heads == {"1": [0, 1], "0": [0]}
    attention = model.encoder.layer[0].attention
    assert attention.self.num_heads == 1 and attention.self.kept_heads == [1]
    assert attention.self.query.weight.shape == (4, 8) and attention.output.dense.weight.shape == (8, 4)
    assert model.encoder.layer[1].attention.self.num_heads == 0
    assert model.encoder.layer[1].attention.self.query.weight.shape == (0, 8)
    assert model.encoder.layer[1].attention.output.dense.weight.shape == (8, 0)
    rebuilt = ToyModel(ToyConfig(pruned_heads={"0": [0]}))
    assert rebuilt.encoder.layer[0].attention.self.kept_heads == [1]
    assert rebuilt.encoder.layer[1].attention.self.kept_heads == [0, 1]


@pytest.mark.parametrize(
    ("heads", "message"),
    [
        ({2: [0]}, r"prune_heads: layer 2 does not exist \(2 layers\)"),
        ({-1: [0]}, r"prune_heads: layer -1 does not exist \(2 layers\)"),
        ({0: [0, 2]}, r"prune_heads: heads \[2\] do not exist \(2 heads\)"),
        ({1: [-1, 1]}, r"prune_heads: heads \[-1\] do not exist \(2 heads\)"),
    ],
)
def test_pruning_heads_that_do_not_exist_is_refused(heads: dict[int, list[int]], message: str) -> None:
    model = toy()
    with pytest.raises(ToyInputError, match=message):
        model.prune_heads(heads)
    assert getattr(model.config, "pruned_heads", None) in (None, {})
    assert model.encoder.layer[0].attention.self.num_heads == 2


def test_pruning_the_same_head_twice_changes_nothing() -> None:
    model = toy()
    model.prune_heads({0: [1]})
    before = model.encoder.layer[0].attention.output.dense
    model.prune_heads({0: [1]})
    assert model.encoder.layer[0].attention.output.dense is before
    assert model.config.pruned_heads == {"0": [1]}


def test_self_attention_with_its_own_output_projection_prunes_it_and_keeps_grad_settings() -> None:
    torch.manual_seed(0)
    attention = EncoderSelfAttention(8, 2, 0.0, names=("q", "k", "v"), output="o")
    attention.k.weight.requires_grad_(False)
    x = torch.randn(1, 3, 8)
    from_eager = get_attention_function(ToyConfig(attn_implementation="eager"))
    with torch.no_grad():
        masked, weights = attention(x, None, from_eager, True, torch.tensor([0.0, 1.0]))
    attention.prune({0})
    with torch.no_grad():
        pruned, pruned_weights = attention(x, None, from_eager, True)
    torch.testing.assert_close(pruned, masked)
    torch.testing.assert_close(pruned_weights, weights[:, 1:])
    assert attention.k.weight.requires_grad is False and attention.q.weight.requires_grad is True
    assert attention.o.bias.shape == (8,) and attention.q.bias.shape == (4,)
    assert attention.o.weight.shape == (8, 4) and attention.kept_heads == [1]


# -- the pre-trained mixin: refused settings, checkpoint names -------------------------------------------
@pytest.mark.parametrize("setting", ["is_decoder", "add_cross_attention"])
def test_decoder_settings_are_refused_naming_the_setting_config_and_model(setting: str) -> None:
    message = (
        f"{setting}=True in the ToyConfig asks for a causal or cross-attending encoder, which ToyModel does not "
        "provide; set it to false for the bidirectional encoder"
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        ToyModel(ToyConfig(**{setting: True}))
    assert ToyModel(ToyConfig(**{setting: False})).config.num_hidden_layers == 2


def test_the_output_bias_gets_both_of_its_names() -> None:
    renamed = {"lm_head.bias": "lm_head.bias", "x.cls.decoder.bias": "x.cls.decoder.bias", "lm_head.weight": "w"}
    assert mirror_output_bias(dict(renamed), "lm_head") == {**renamed, "lm_head.decoder.bias": "lm_head.bias"}
    assert mirror_output_bias(dict(renamed), "cls") == {**renamed, "x.cls.bias": "x.cls.decoder.bias"}
    both = {"lm_head.bias": "a", "lm_head.decoder.bias": "b"}
    assert mirror_output_bias(dict(both), "lm_head") == both
    assert mirror_output_bias({"head.bias": "head.bias"}, "lm_head") == {"head.bias": "head.bias"}


# -- heads -------------------------------------------------------------------------------------------------
def test_labelled_heads_give_logits_losses_extras_and_tuples() -> None:
    model = toy(ToyForMaskedLM)
    labels = torch.full((2, 6), -100)
    labels[0, 2] = 7
    with torch.no_grad():
        out = model(IDS, attention_mask=MASK, labels=labels, output_hidden_states=True, output_attentions=True)
        bare = model(IDS, attention_mask=MASK)
        as_tuple = model(IDS, attention_mask=MASK, labels=labels, return_dict=False)
        base = model.toy(IDS, attention_mask=MASK)
    assert type(out).__name__ == "MaskedLMOutput" and out.logits.shape == (2, 6, 30)
    torch.testing.assert_close(out.logits, model.lm_head.decoder(base.last_hidden_state))
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits[0, 2:3], torch.tensor([7])))
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2
    assert bare.loss is None and bare.hidden_states is None and bare.attentions is None
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2
    assert_close(as_tuple[0], out.loss)  # out asked for attentions: eager attention, not the default kernel
    model.config.return_dict = False
    with torch.no_grad():
        by_config = model(IDS, attention_mask=MASK)
        asked = model(IDS, attention_mask=MASK, return_dict=True)
    # exact: the same model on the same inputs: same kernels, same shapes (both checks)
    assert isinstance(by_config, tuple) and torch.equal(by_config[0], bare.logits)
    assert type(asked).__name__ == "MaskedLMOutput" and torch.equal(asked.logits, bare.logits)


def test_heads_pass_the_head_mask_and_inputs_on_to_the_base_model() -> None:
    model = toy(ToyForTokenClassification, num_labels=3)
    mask = torch.tensor([0.0, 1.0])
    with torch.no_grad():
        masked = model(IDS, attention_mask=MASK, token_type_ids=SEGMENTS, head_mask=mask).logits
        base = model.toy(IDS, attention_mask=MASK, token_type_ids=SEGMENTS, head_mask=mask).last_hidden_state
        embeds = model(inputs_embeds=model.get_input_embeddings()(IDS), attention_mask=MASK, token_type_ids=SEGMENTS)
        moved = model(IDS[:, :4], position_ids=torch.tensor([[3, 4, 5, 6]])).logits
        plain = model(IDS[:, :4]).logits
    torch.testing.assert_close(masked, model.classifier(base))
    torch.testing.assert_close(embeds.logits, model(IDS, attention_mask=MASK, token_type_ids=SEGMENTS).logits)
    assert not torch.allclose(moved, plain)


def test_token_classification_head_and_its_loss() -> None:
    model = toy(ToyForTokenClassification, num_labels=3, classifier_dropout=0.25, hidden_dropout_prob=0.125)
    assert model.num_labels == 3 and model.classifier.out_features == 3 and model.dropout.p == 0.25
    assert model.toy.pooler is None
    assert toy(ToyForTokenClassification, hidden_dropout_prob=0.125).dropout.p == 0.125
    labels = torch.tensor([[0, 1, 2, -100, -100, -100], [2, 2, 1, 0, -100, -100]])
    with torch.no_grad():
        out = model(IDS, attention_mask=MASK, labels=labels)
    assert type(out).__name__ == "TokenClassifierOutput"
    expected = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 3), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    assert model.get_input_embeddings() is model.toy.embeddings.word_embeddings
    replacement = nn.Embedding(30, 8)
    model.set_input_embeddings(replacement)
    assert model.toy.embeddings.word_embeddings is replacement and model.get_input_embeddings() is replacement


def test_sequence_classification_loss_follows_the_problem_type() -> None:
    model = toy(ToyForSequenceClassification, num_labels=3)
    with torch.no_grad():
        out = model(IDS, attention_mask=MASK, labels=torch.tensor([2, 0]))
        multi = model(IDS, attention_mask=MASK, labels=torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]))
    assert type(out).__name__ == "SequenceClassifierOutput" and out.logits.shape == (2, 3)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, torch.tensor([2, 0])))
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        multi.logits, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    )
    torch.testing.assert_close(multi.loss, expected)


def test_question_answering_splits_logits_and_scores_spans_only_with_both_positions() -> None:
    model = toy(ToyForQuestionAnswering, num_labels=2)
    assert model.num_labels == 2 and model.qa_outputs.out_features == 2 and model.toy.pooler is None
    start, end = torch.tensor([1, 2]), torch.tensor([3, 9])
    with torch.no_grad():
        out = model(IDS, attention_mask=MASK, start_positions=start, end_positions=end, output_attentions=True)
        only_start = model(IDS, attention_mask=MASK, start_positions=start)
        as_tuple = model(IDS, attention_mask=MASK, return_dict=False)
        logits = model.qa_outputs(model.toy(IDS, attention_mask=MASK).last_hidden_state)
    torch.testing.assert_close(out.start_logits, logits[..., 0])
    torch.testing.assert_close(out.end_logits, logits[..., 1])
    expected = (
        torch.nn.functional.cross_entropy(out.start_logits, start)
        + torch.nn.functional.cross_entropy(out.end_logits, end.clamp(0, 6), ignore_index=6)
    ) / 2
    torch.testing.assert_close(out.loss, expected)
    assert len(out.attentions) == 2 and out.hidden_states is None
    assert only_start.loss is None and isinstance(as_tuple, tuple) and len(as_tuple) == 2
    positions = torch.arange(1, 7).expand(2, 6)
    with torch.no_grad():
        embeds = model.get_input_embeddings()(IDS)
        full = model(inputs_embeds=embeds, token_type_ids=SEGMENTS, position_ids=positions, output_hidden_states=True)
        base = model.toy(IDS, token_type_ids=SEGMENTS, position_ids=positions)
    torch.testing.assert_close(full.start_logits, model.qa_outputs(base.last_hidden_state)[..., 0])
    assert len(full.hidden_states) == 3 and full.attentions is None
    with pytest.raises(ConfigError, match=r"ToyForQuestionAnswering needs num_labels=2 .* has num_labels=3; drop"):
        ToyForQuestionAnswering(ToyConfig(num_labels=3))


# -- the layer loop --------------------------------------------------------------------------------------
def test_layers_run_through_gradient_checkpointing_when_it_is_on() -> None:
    model = toy()
    calls: list[int] = []
    model.encoder.layer[0].register_forward_pre_hook(lambda *_: calls.append(0))
    model.gradient_checkpointing_enable()
    model.train()
    model(IDS, attention_mask=MASK).last_hidden_state.sum().backward()
    assert len(calls) == 2  # the forward pass, then its recomputation during backward
    model.eval()
    calls.clear()
    with torch.no_grad():
        model(IDS)
    assert len(calls) == 1


def test_run_encoder_returns_every_hidden_state_and_takes_an_additive_mask() -> None:
    model = toy()
    embedded = model.embeddings(IDS, None, None, None)
    additive = torch.zeros(2, 1, 6, 6)
    additive[1, ..., 4:] = torch.finfo(torch.float32).min
    with torch.no_grad():
        last, states, attentions = run_encoder(model, model.encoder.layer, embedded, additive, True)
        reference = model(IDS, attention_mask=MASK, output_hidden_states=True, output_attentions=True)
        quiet_last, _, none = run_encoder(model, model.encoder.layer, embedded, MASK, False, [None, None])
    assert len(states) == 3 and states[0] is embedded and states[-1] is last and len(attentions) == 2
    torch.testing.assert_close(last, reference.last_hidden_state)
    torch.testing.assert_close(attentions[1], reference.attentions[1])
    torch.testing.assert_close(quiet_last, last) and none == []
    with pytest.raises(ToyInputError, match="attention_mask has 5 columns but the input has 6 tokens"):
        run_encoder(model, model.encoder.layer, embedded, torch.ones(2, 5), False, error=ToyInputError)


def test_pruned_projections_are_proper_linears_with_their_bias_and_grad_settings() -> None:
    torch.manual_seed(0)
    attention = EncoderSelfAttention(8, 2, 0.0)
    attention.value.bias.requires_grad_(False)
    dense = nn.Linear(8, 6, bias=False)
    biased = nn.Linear(8, 6)
    pruned_dense = attention.prune({1}, dense)
    assert pruned_dense is not None and pruned_dense.bias is None
    assert (pruned_dense.in_features, pruned_dense.out_features) == (4, 6)
    torch.testing.assert_close(pruned_dense.weight, dense.weight[:, :4])
    value = attention.value
    assert (value.in_features, value.out_features) == (8, 4) and value.bias.requires_grad is False
    assert attention.query.bias.requires_grad is True
    second = EncoderSelfAttention(8, 2, 0.0)
    kept_bias = second.prune({0}, biased)
    assert kept_bias is not None and (kept_bias.in_features, kept_bias.out_features) == (4, 6)
    torch.testing.assert_close(kept_bias.bias, biased.bias)  # the output bias is not per head: kept whole
    torch.testing.assert_close(kept_bias.weight, biased.weight[:, 4:])
    assert attention.prune({5}, biased) is biased  # nothing to remove: the projection is returned as it is


def test_attention_dropout_applies_in_training_only() -> None:
    model = toy(attention_probs_dropout_prob=0.5)
    assert model.encoder.layer[0].attention.self.attention_dropout == 0.5
    with torch.no_grad():
        evaluated = model(IDS).last_hidden_state
        torch.manual_seed(3)
        trained = model.train()(IDS).last_hidden_state
    assert not torch.allclose(evaluated, trained)
    still = toy(attention_probs_dropout_prob=None).train()
    assert still.encoder.layer[0].attention.self.attention_dropout == 0.0
    with torch.no_grad():
        torch.testing.assert_close(still(IDS).last_hidden_state, still.eval()(IDS).last_hidden_state)


# -- loading: old parameter names and the output bias under either name --------------------------------
def test_checkpoints_with_legacy_names_and_one_output_bias_load_every_weight(tmp_path: Path) -> None:
    model = toy(ToyForMaskedLM)
    with torch.no_grad():
        model.lm_head.decoder.bias.copy_(torch.linspace(-1, 1, 30))
        model.lm_head.bias.copy_(torch.linspace(-1, 1, 30))
        model.toy.embeddings.LayerNorm.bias.fill_(0.25)
    model.save_pretrained(tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    old = {re.sub(r"LayerNorm\.weight$", "LayerNorm.gamma", re.sub(r"LayerNorm\.bias$", "LayerNorm.beta", k)): v
           for k, v in tensors.items() if k != "lm_head.decoder.bias"}  # fmt: skip
    assert "toy.embeddings.LayerNorm.gamma" in old and "lm_head.bias" in old
    save_file(old, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    loaded = ToyForMaskedLM.from_pretrained(tmp_path).eval()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, msg=name)
    decoder_only = {k: v for k, v in tensors.items() if k != "lm_head.bias"}
    save_file(decoder_only, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    torch.testing.assert_close(ToyForMaskedLM.from_pretrained(tmp_path).lm_head.bias, model.lm_head.bias)


def test_a_base_model_round_trips_through_its_files(tmp_path: Path) -> None:
    model = toy()
    model.save_pretrained(tmp_path)
    loaded = ToyModel.from_pretrained(tmp_path).eval()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, msg=name)


# From test_encoder_rest_mutants.py: ``microformers_sdk.encoder`` behaviour the seventh mutation pass found
# unasserted (docs/reliability.md). The mutants of the encoder's layers, embeddings and base model ``forward`` that
# the full run left: attention dropout only in training (also in the returned attention probabilities), every post-
# norm block using the configured ``layer_norm_eps``, and a base model mixed in without an ``input_error`` of its
# own raising the SDK's ``InputError``. A tiny BERT-style family is built from the SDK's mixins the way a plugin
# builds one.


REST_SETTINGS: dict[str, Any] = {
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
        super().__init__(**{**REST_SETTINGS, **kwargs})


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

"""``microformers_sdk.encoder``: the small building blocks BERT, DistilBERT and RoBERTa call from their model files
(one-input check, head masks, head pruning, the masked-LM output bias's two names, the task heads' settings and the
extractive-QA output). The families' own layers and forwards are tested in their plugins."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from microformers import PretrainedConfig
from microformers.errors import ConfigError, InputError
from microformers_sdk.encoder import (
    check_one_input,
    classifier_dropout,
    layer_head_masks,
    mirror_output_bias,
    prune_model_heads,
    question_answering_output,
    require_two_labels,
)
from microformers_sdk.outputs import QuestionAnsweringModelOutput


class ToyInputError(InputError):
    """A family's own input error."""


class ToyConfig(PretrainedConfig):
    model_type = "encoder-helpers-toy"

    def __init__(self, **kwargs: Any) -> None:
        settings = {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_dropout_prob": 0.125}
        super().__init__(**{**settings, **kwargs})


class ToyBase:
    """What ``prune_model_heads`` calls on the base model: ``_prune_heads({layer: [head, ...]})``."""

    def __init__(self) -> None:
        self.calls: list[dict[int, list[int]]] = []

    def _prune_heads(self, heads: dict[int, list[int]]) -> None:
        self.calls.append(heads)


class ToyModel:
    def __init__(self, **settings: Any) -> None:
        self.config = ToyConfig(**settings)
        self.base_model = ToyBase()


# -- inputs ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("input_ids", "inputs_embeds"), [(None, None), (torch.ones(1, 2), torch.ones(1, 2, 4))])
def test_exactly_one_of_ids_or_embeddings_is_asked_for_naming_the_model(input_ids: Any, inputs_embeds: Any) -> None:
    with pytest.raises(ToyInputError) as raised:
        check_one_input(ToyModel(), input_ids, inputs_embeds, ToyInputError)
    assert str(raised.value) == "ToyModel.forward needs exactly one of input_ids or inputs_embeds"
    with pytest.raises(InputError, match="ToyModel.forward needs exactly one of input_ids or inputs_embeds"):
        check_one_input(ToyModel(), input_ids, inputs_embeds)
    check_one_input(ToyModel(), torch.ones(1, 2), None)
    check_one_input(ToyModel(), None, torch.ones(1, 2, 4))


# -- head masks --------------------------------------------------------------------------------------------
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


@pytest.mark.parametrize(
    ("head_mask", "message"),
    [
        (torch.ones(3), r"head_mask has shape \(3,\); pass \(2,\) for every layer or \(2, 2\), 1.0 to keep a head and "
                        r"0.0 to mask it \(indices of the original, unpruned heads\)"),
        (torch.ones(3, 2), r"head_mask has shape \(3, 2\)"),
    ],
)  # fmt: skip
def test_a_head_mask_of_another_shape_raises_the_plugins_error(head_mask: torch.Tensor, message: str) -> None:
    with pytest.raises(ToyInputError, match=message):
        layer_head_masks(head_mask, 2, 2, ToyInputError)


# -- head pruning ------------------------------------------------------------------------------------------
def test_pruning_records_heads_in_the_config_and_passes_integer_layers_to_the_base_model() -> None:
    model = ToyModel()
    prune_model_heads(model, {1: [0]})
    prune_model_heads(model, {"1": [1], 0: [0]})  # type: ignore[dict-item]
    assert model.config.pruned_heads == {"1": [0, 1], "0": [0]}
    assert model.base_model.calls == [{1: [0]}, {1: [1], 0: [0]}]


def test_pruning_the_same_head_twice_records_it_once() -> None:
    model = ToyModel()
    prune_model_heads(model, {0: [1]})
    prune_model_heads(model, {0: [1]})
    assert model.config.pruned_heads == {"0": [1]}


def test_pruning_adds_to_the_heads_the_config_already_records() -> None:
    model = ToyModel(pruned_heads={"0": [0]})
    prune_model_heads(model, {0: [1]})
    assert model.config.pruned_heads == {"0": [0, 1]}


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
    model = ToyModel()
    with pytest.raises(ToyInputError, match=message):
        prune_model_heads(model, heads, ToyInputError)
    assert getattr(model.config, "pruned_heads", None) in (None, {})
    assert model.base_model.calls == []
    with pytest.raises(InputError, match=message):
        prune_model_heads(model, heads)


# -- checkpoint names --------------------------------------------------------------------------------------
def test_the_output_bias_gets_both_of_its_names() -> None:
    renamed = {"lm_head.bias": "lm_head.bias", "x.cls.decoder.bias": "x.cls.decoder.bias", "lm_head.weight": "w"}
    assert mirror_output_bias(dict(renamed), "lm_head") == {**renamed, "lm_head.decoder.bias": "lm_head.bias"}
    assert mirror_output_bias(dict(renamed), "cls") == {**renamed, "x.cls.bias": "x.cls.decoder.bias"}
    both = {"lm_head.bias": "a", "lm_head.decoder.bias": "b"}
    assert mirror_output_bias(dict(both), "lm_head") == both
    assert mirror_output_bias({"head.bias": "head.bias"}, "lm_head") == {"head.bias": "head.bias"}


# -- heads -------------------------------------------------------------------------------------------------
def test_classifier_dropout_falls_back_to_the_hidden_dropout() -> None:
    assert classifier_dropout(ToyConfig(classifier_dropout=0.25)) == 0.25
    assert classifier_dropout(ToyConfig(classifier_dropout=None)) == 0.125
    assert classifier_dropout(ToyConfig(classifier_dropout=0.0)) == 0.0


def test_question_answering_needs_two_labels() -> None:
    require_two_labels(ToyConfig(num_labels=2), "ToyForQuestionAnswering")
    with pytest.raises(ConfigError) as raised:
        require_two_labels(ToyConfig(num_labels=3), "ToyForQuestionAnswering")
    assert str(raised.value) == (
        "ToyForQuestionAnswering needs num_labels=2 (start and end logits) but the config has num_labels=3; "
        "drop num_labels/id2label from config.json or set num_labels=2"
    )


def test_question_answering_splits_logits_and_scores_spans_only_with_both_positions() -> None:
    logits = torch.randn(2, 6, 2, generator=torch.Generator().manual_seed(0))
    encoded = QuestionAnsweringModelOutput(hidden_states=("h0", "h1"), attentions=("a0",))
    start, end = torch.tensor([1, 2]), torch.tensor([3, 9])
    out = question_answering_output(logits, start, end, encoded)
    assert isinstance(out, QuestionAnsweringModelOutput)
    # exact: slices of the same tensor
    assert torch.equal(out.start_logits, logits[..., 0]) and torch.equal(out.end_logits, logits[..., 1])
    assert out.start_logits.is_contiguous() and out.end_logits.shape == (2, 6)
    expected = (
        torch.nn.functional.cross_entropy(out.start_logits, start)
        + torch.nn.functional.cross_entropy(out.end_logits, end.clamp(0, 6), ignore_index=6)
    ) / 2
    torch.testing.assert_close(out.loss, expected)
    assert out.hidden_states == ("h0", "h1") and out.attentions == ("a0",)
    assert question_answering_output(logits, start, None, encoded).loss is None
    assert question_answering_output(logits, None, end, encoded).loss is None
    as_tuple = question_answering_output(logits, None, None, QuestionAnsweringModelOutput()).to_tuple()
    assert len(as_tuple) == 2

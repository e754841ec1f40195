"""microformers-bert on its own (no reference implementation): registration, configs, loading, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from microformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, registry
from microformers.errors import ConfigError
from microformers_bert.configuration_bert import BertConfig
from microformers_bert.modeling_bert import (
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertInputError,
    BertModel,
)

TINY: dict[str, Any] = {
    "vocab_size": 50,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 24,
    "max_position_embeddings": 12,
}


def tiny(cls: type = BertModel, **overrides: Any) -> Any:
    torch.manual_seed(0)
    return cls(BertConfig(**{**TINY, **overrides})).eval()


def test_plugin_registers_every_head() -> None:
    assert registry.get("configs", "bert").plugin == "bert"
    expected = {
        "AutoModel": "BertModel",
        "AutoModelForMaskedLM": "BertForMaskedLM",
        "AutoModelForPreTraining": "BertForPreTraining",
        "AutoModelForNextSentencePrediction": "BertForNextSentencePrediction",
        "AutoModelForSequenceClassification": "BertForSequenceClassification",
        "AutoModelForTokenClassification": "BertForTokenClassification",
        "AutoModelForQuestionAnswering": "BertForQuestionAnswering",
    }
    for auto, name in expected.items():
        assert registry.require("models", ("bert", auto)).__name__ == name
        assert registry.get("architectures", name) is not None


def test_auto_classes_round_trip_and_share_the_encoder(tmp_path: Path) -> None:
    model = tiny(BertForMaskedLM)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForMaskedLM"]
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert "cls.predictions.decoder.weight" not in saved  # tied to the word embeddings
    assert "cls.predictions.bias" in saved
    assert isinstance(AutoConfig.from_pretrained(tmp_path), BertConfig)
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert reloaded.cls.predictions.decoder.weight is reloaded.bert.embeddings.word_embeddings.weight
    # The base model reads the encoder out of a head checkpoint (dropping the "bert." prefix). The MLM
    # checkpoint has no pooler, which BERT declares fine to initialise.
    base = AutoModel.from_pretrained(tmp_path)
    assert base.pooler.dense.weight.device.type == "cpu"
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        torch.testing.assert_close(base(ids).last_hidden_state, model.bert(ids).last_hidden_state)
    # A classifier starts from the encoder: its new head is reported missing and initialised, as is the pooler.
    torch.manual_seed(1)  # the statistics below are then the same whatever ran before
    classifier, info = AutoModelForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert {"classifier.weight", "classifier.bias"} <= set(info["missing_keys"])
    # initialised like the reference: weights ~ N(0, initializer_range), biases zero (isfinite alone passes on
    # uninitialised memory most of the time)
    std = classifier.config.initializer_range
    for name in ("bert.pooler.dense", "classifier"):
        layer = classifier.get_submodule(name)
        weight = layer.weight.detach().double()
        assert abs(weight.std().item() - std) < 0.25 * std, f"{name}.weight std {weight.std().item()} != {std}"
        assert abs(weight.mean().item()) < 5 * std / weight.numel() ** 0.5, f"{name}.weight mean"
        assert torch.count_nonzero(layer.bias) == 0, f"{name}.bias is not zero"
    # the loaded encoder is the saved one, not re-initialised
    # exact: loading copies the saved bytes
    torch.testing.assert_close(classifier.bert.encoder.state_dict(), model.bert.encoder.state_dict(), rtol=0, atol=0)


def test_token_type_ids_and_padding_change_the_right_things() -> None:
    model = tiny()
    ids = torch.tensor([[2, 7, 9, 4, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).last_hidden_state
        segments = model(ids, attention_mask=mask, token_type_ids=torch.tensor([[0, 0, 1, 1, 0, 0]])).last_hidden_state
        unpadded = model(ids[:, :4]).last_hidden_state
    assert not torch.allclose(plain[:, :4], segments[:, :4])
    torch.testing.assert_close(plain[:, :4], unpadded, atol=1e-5, rtol=0)


def test_sequence_classification_losses_follow_problem_type() -> None:
    ids = torch.tensor([[2, 7, 9], [4, 5, 6]])
    single = tiny(BertForSequenceClassification, num_labels=3)
    assert single(ids, labels=torch.tensor([0, 2])).loss > 0
    multi = tiny(BertForSequenceClassification, num_labels=3, problem_type="multi_label_classification")
    logits = multi(ids).logits
    want = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor([[1.0, 0, 1], [0, 1, 0]]))
    torch.testing.assert_close(multi(ids, labels=torch.tensor([[1.0, 0, 1], [0, 1, 0]])).loss, want)
    regression = tiny(BertForSequenceClassification, num_labels=1)
    targets = torch.tensor([0.5, -1.0])
    want = torch.nn.functional.mse_loss(regression(ids).logits.squeeze(-1), targets)
    torch.testing.assert_close(regression(ids, labels=targets).loss, want)
    bogus = tiny(BertForSequenceClassification, num_labels=3, problem_type="ranking")
    with pytest.raises(ConfigError, match="problem_type"):
        bogus(ids, labels=torch.tensor([0, 1]))


def test_question_answering_ignores_out_of_range_positions() -> None:
    model = tiny(BertForQuestionAnswering)
    ids = torch.tensor([[2, 7, 9, 4], [3, 5, 8, 1]])
    out = model(ids, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([99, 3]))
    start = torch.nn.functional.cross_entropy(out.start_logits, torch.tensor([1, 2]))
    end = torch.nn.functional.cross_entropy(out.end_logits[1:], torch.tensor([3]))
    torch.testing.assert_close(out.loss, (start + end) / 2)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"hidden_size": 15}, "not a multiple of num_attention_heads"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ],
)
def test_bad_configs_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BertConfig(**{**TINY, **overrides})


@pytest.mark.parametrize(
    ("cls", "overrides", "message"),
    [
        (BertModel, {"add_cross_attention": True}, "add_cross_attention"),
        (BertModel, {"hidden_act": "mystery"}, "hidden_act"),
        (BertForQuestionAnswering, {"num_labels": 3}, "num_labels=2"),
    ],
)
def test_unsupported_model_settings_are_refused(cls: type, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cls(BertConfig(**{**TINY, **overrides}))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of input_ids or inputs_embeds"),
        ({"input_ids": torch.ones(1, 13, dtype=torch.long)}, "max_position_embeddings=12"),
        ({"input_ids": torch.ones(1, 4, dtype=torch.long), "token_type_ids": torch.zeros(1, 3, dtype=torch.long)},
         "token_type_ids has shape"),
        ({"input_ids": torch.ones(1, 4, dtype=torch.long), "attention_mask": torch.ones(1, 5)}, "attention_mask has 5"),
        ({"input_ids": torch.ones(1, 4, dtype=torch.long), "position_ids": torch.tensor([[0, 1, 2, 12]])},
         "position_ids must lie"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_input_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(BertInputError, match=message):
        tiny()(**kwargs)


def test_inputs_embeds_match_input_ids() -> None:
    model = tiny(BertForMaskedLM)
    ids = torch.tensor([[2, 7, 9, 4]])
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        torch.testing.assert_close(model(inputs_embeds=embeds).logits, model(ids).logits)
    assert model(ids, return_dict=False)[0].shape == (1, 4, TINY["vocab_size"])


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_a_layer_with_every_head_pruned_still_runs(attn_implementation: str) -> None:
    """With no heads left, the attention block adds only its output bias before the LayerNorm."""
    model = tiny(attn_implementation=attn_implementation)
    model.prune_heads({0: list(range(model.config.num_attention_heads))})
    attention = model.encoder.layer[0].attention
    seen: dict[str, torch.Tensor] = {}
    attention.register_forward_hook(lambda module, args, out: seen.update(input=args[0], output=out[0]))
    with torch.no_grad():
        model(torch.tensor([[1, 5, 7, 3]]))
        expected = attention.output.LayerNorm(seen["input"] + attention.output.dense.bias)
    assert attention.self.query.out_features == 0
    torch.testing.assert_close(seen["output"], expected)

"""The SDK conformance kits on microformers-distilbert: its model classes and its entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from microformers import AutoModel
from microformers.errors import ConfigError
from microformers_distilbert.configuration_distilbert import DistilBertConfig
from microformers_distilbert.modeling_distilbert import (
    DistilBertForMaskedLM,
    DistilBertForQuestionAnswering,
    DistilBertForSequenceClassification,
    DistilBertForTokenClassification,
    DistilBertModel,
    sinusoidal_table,
)
from microformers_sdk.testing import ModelConformanceTests, PluginConformanceTests

TINY = {"vocab_size": 64, "dim": 32, "hidden_dim": 48, "n_layers": 2, "n_heads": 4, "max_position_embeddings": 32}


class TestDistilBertConformance(ModelConformanceTests):
    config_class = DistilBertConfig
    config_kwargs = {**TINY, "num_labels": 2}
    model_classes = (
        DistilBertModel,
        DistilBertForMaskedLM,
        DistilBertForSequenceClassification,
        DistilBertForTokenClassification,
        DistilBertForQuestionAnswering,
    )
    padding_side = "right"  # absolute positions count from the first token
    # The span loss is a softmax over positions: a bias shared by every position cancels out of it exactly.
    parameters_without_gradient = (r"^qa_outputs\.bias$",)


class TestDistilBertPluginConformance(PluginConformanceTests):
    plugin_name = "distilbert"
    registers = (("configs", "distilbert"),)


def test_config_aliases_follow_the_reference() -> None:
    config = DistilBertConfig(**TINY)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 2, 4)
    assert "hidden_size" not in config.to_dict() and config.to_dict()["dim"] == 32


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"n_heads": 5}, "n_heads"),
        ({"dim": 0}, "dim"),
        ({"n_layers": "2"}, "n_layers"),
    ],
)
def test_bad_config_is_refused_naming_field_and_file(tmp_path: Path, change: dict, field: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "distilbert", **TINY, **change}))
    with pytest.raises(ConfigError) as info:
        AutoModel.from_pretrained(tmp_path)
    assert field in str(info.value)
    assert "config.json" in str(info.value)


def test_question_answering_needs_two_labels() -> None:
    with pytest.raises(ConfigError, match="num_labels=3"):
        DistilBertForQuestionAnswering(DistilBertConfig(**TINY, num_labels=3))


def test_sinusoidal_positions_at_initialisation() -> None:
    torch.manual_seed(0)
    model = DistilBertModel(DistilBertConfig(**TINY, sinusoidal_pos_embds=True))
    table = model.embeddings.position_embeddings.weight
    assert torch.allclose(table, sinusoidal_table(32, 32))
    assert torch.allclose(table[3, 0], torch.sin(torch.tensor(3.0))) and torch.allclose(
        table[3, 1], torch.cos(torch.tensor(3.0))
    )


def test_kernel_names_this_distribution_when_distilbert_is_missing() -> None:
    from microformers import registry

    assert registry.provider_of("configs", "distilbert") == "microformers-distilbert"

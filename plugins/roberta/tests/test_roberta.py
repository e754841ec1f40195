"""microformers-roberta: the SDK conformance kits, positions, bad configs and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoConfig, AutoModel, AutoModelForMaskedLM, registry
from microformers.errors import ConfigError
from microformers_roberta.configuration_roberta import RobertaConfig
from microformers_roberta.configuration_xlm_roberta import XLMRobertaConfig
from microformers_roberta.modeling_roberta import (
    RobertaForCausalLM,
    RobertaForMaskedLM,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaInputError,
    RobertaModel,
    create_position_ids_from_input_ids,
)
from microformers_roberta.modeling_xlm_roberta import (
    XLMRobertaForMaskedLM,
    XLMRobertaForQuestionAnswering,
    XLMRobertaForSequenceClassification,
    XLMRobertaForTokenClassification,
    XLMRobertaModel,
)
from microformers_sdk.testing import ModelConformanceTests, PluginConformanceTests

TINY: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "max_position_embeddings": 24,
    "type_vocab_size": 1,
}


class TestRobertaConformance(ModelConformanceTests):
    config_class = RobertaConfig
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification, RobertaForTokenClassification)
    padding_side = "right"
    # RobertaModel's forward takes past_key_values / use_cache, but an encoder keeps no cache.
    test_cache_equivalence = None


class TestRobertaDecoderConformance(ModelConformanceTests):
    """``is_decoder=True``. The kit's cache check (left padding, no position ids) does not apply: as in the
    reference, default positions count a row's non-padding tokens plus the cache length, so stepping through
    cached padding needs explicit ``position_ids``, which ``generate`` passes (the parity tests generate)."""

    config_class = RobertaConfig
    config_kwargs = {**TINY, "is_decoder": True}
    model_classes = (RobertaModel, RobertaForCausalLM)
    padding_side = "right"
    test_cache_equivalence = None


class TestXLMRobertaConformance(ModelConformanceTests):
    config_class = XLMRobertaConfig
    config_kwargs = {**TINY, "num_labels": 2}
    model_classes = (
        XLMRobertaModel,
        XLMRobertaForMaskedLM,
        XLMRobertaForSequenceClassification,
        XLMRobertaForTokenClassification,
        XLMRobertaForQuestionAnswering,
    )
    padding_side = "right"  # the pooler and the classifier read the first token
    # The span loss is a softmax over positions: a bias shared by every position cancels out of it exactly.
    parameters_without_gradient = (r"^qa_outputs\.bias$",)
    test_cache_equivalence = None  # an encoder keeps no cache


class TestRobertaPluginConformance(PluginConformanceTests):
    plugin_name = "roberta"
    registers = (("configs", "roberta"), ("configs", "xlm-roberta"))


def test_auto_classes_dispatch_both_model_types(tmp_path: Path) -> None:
    for config, cls in ((RobertaConfig(**TINY), RobertaForMaskedLM), (XLMRobertaConfig(**TINY), XLMRobertaForMaskedLM)):
        folder = tmp_path / config.model_type
        cls(config).save_pretrained(folder)
        assert type(AutoConfig.from_pretrained(folder)) is type(config)
        model = AutoModelForMaskedLM.from_pretrained(folder)
        assert type(model) is cls and type(model.roberta).__name__ == cls.__name__.replace("ForMaskedLM", "Model")
    assert registry.provider_of("configs", "xlm-roberta") == "microformers-roberta"


def test_position_ids_count_real_tokens_from_the_padding_index() -> None:
    ids = torch.tensor([[1, 1, 0, 9, 2], [0, 9, 9, 2, 1]])
    assert create_position_ids_from_input_ids(ids, 1).tolist() == [[1, 1, 2, 3, 4], [2, 3, 4, 5, 1]]
    model = RobertaModel(RobertaConfig(**TINY)).eval()
    embeds = model.embeddings
    assert embeds.default_position_ids(None, torch.zeros(1, 3, 32)).tolist() == [[2, 3, 4]]
    assert embeds.position_embeddings.padding_idx == 1
    assert torch.all(embeds.position_embeddings.weight[1] == 0)  # as initialised by the reference


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_attention_heads": 5}, "num_attention_heads"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"pad_token_id": 64}, "pad_token_id"),
        ({"pad_token_id": None}, "pad_token_id"),
        ({"pad_token_id": 30}, "pad_token_id"),  # inside the vocabulary but past the position table
        ({"type_vocab_size": 0}, "type_vocab_size"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ],
)
@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta"])
def test_bad_config_is_refused_naming_field_and_file(tmp_path: Path, model_type: str, change: dict, field: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, **TINY, **change}))
    with pytest.raises(ConfigError) as info:
        AutoModel.from_pretrained(tmp_path)
    assert field in str(info.value)
    assert str(tmp_path / "config.json") in str(info.value)


@pytest.mark.parametrize(
    ("cls", "overrides", "message"),
    [
        (RobertaModel, {"add_cross_attention": True}, "add_cross_attention"),
        (RobertaModel, {"hidden_act": "mystery"}, "hidden_act"),
        (RobertaForQuestionAnswering, {"num_labels": 3}, "num_labels=2"),
    ],
)
def test_unsupported_model_settings_are_refused(cls: type, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cls(RobertaConfig(**{**TINY, **overrides}))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of input_ids or inputs_embeds"),
        ({"input_ids": torch.full((1, 23), 5)}, "takes at most 22"),
        ({"input_ids": torch.full((1, 4), 5), "token_type_ids": torch.ones(1, 4, dtype=torch.long)},
         "type_vocab_size"),
        ({"input_ids": torch.full((1, 4), 5), "attention_mask": torch.ones(1, 5)}, "attention_mask has 5"),
        ({"input_ids": torch.full((1, 4), 5), "position_ids": torch.tensor([[2, 3, 4, 24]])}, "position_ids must lie"),
        ({"input_ids": torch.full((1, 4), 5), "head_mask": torch.ones(3)}, "head_mask has shape"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_input_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RobertaInputError, match=message):
        RobertaModel(RobertaConfig(**TINY))(**kwargs)


def test_longest_input_fits_and_head_mask_and_pruning_work() -> None:
    torch.manual_seed(0)
    model = RobertaForMaskedLM(RobertaConfig(**TINY)).eval()
    ids = torch.full((1, 22), 5)  # the longest input: positions 2 .. 23
    with torch.no_grad():
        full = model(ids).logits
        silenced = model(ids, head_mask=torch.tensor([1.0, 0.0, 1.0, 1.0])).logits
        model.prune_heads({0: [1], 1: [1]})
        pruned = model(ids).logits
    assert not torch.allclose(full, silenced)
    torch.testing.assert_close(pruned, silenced, atol=1e-5, rtol=0)
    assert model.config.pruned_heads == {"0": [1], "1": [1]}

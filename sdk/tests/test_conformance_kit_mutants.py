"""``microformers_sdk.testing`` (the conformance kit) behaviour the mutation pass found unasserted
(docs/reliability.md)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

import microformers
from microformers_sdk.testing import ModelConformanceTests, checks, plugin_checks


class _QA(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor, start_positions: Any = None, end_positions: Any = None) -> dict:
        return {"start_logits": torch.zeros(input_ids.shape), "end_logits": torch.zeros(input_ids.shape)}


class _Regression(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor, labels: Any = None) -> dict:
        return {"logits": torch.zeros(input_ids.shape[0], 1)}


def test_default_labels_for_span_and_regression_heads_are_seeded() -> None:
    inputs = {"input_ids": torch.ones(3, 7, dtype=torch.long)}
    first, second = checks.default_labels(_QA(), inputs, seed=4), checks.default_labels(_QA(), inputs, seed=4)
    assert set(first) == {"start_positions", "end_positions"}
    for key in first:
        assert torch.equal(first[key], second[key]) and first[key].shape == (3,)
        assert 0 <= int(first[key].min()) and int(first[key].max()) < 7
    regression = checks.default_labels(_Regression(), inputs, seed=4)
    assert set(regression) == {"labels"} and regression["labels"].dtype == torch.float32
    # exact: the same seed draws the same numbers
    assert torch.equal(regression["labels"], checks.default_labels(_Regression(), inputs, seed=4)["labels"])


def test_the_kit_pads_with_the_configs_pad_token() -> None:
    kit = ModelConformanceTests()
    assert kit.pad_token_id(SimpleNamespace(pad_token_id=5)) == 5
    assert kit.pad_token_id(SimpleNamespace(pad_token_id=None)) == 0


def test_registrations_that_do_not_resolve_are_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise microformers.PluginError("cannot import 'nowhere:Thing'")

    registrations = [SimpleNamespace(load=broken), SimpleNamespace(load=lambda: object())]
    monkeypatch.setattr(plugin_checks, "discovered", lambda name: SimpleNamespace(registrations=registrations))
    with pytest.raises(AssertionError, match=r"^cannot import 'nowhere:Thing'$"):
        plugin_checks.check_registrations_resolve("any")


class _Kit(ModelConformanceTests):
    def make_config(self) -> Any:
        return SimpleNamespace(pad_token_id=7)

    def make_model(self, model_class: type, config: Any) -> Any:
        return SimpleNamespace(config=config)

    def make_inputs(self, config: Any) -> dict:
        return {}


def test_the_padding_check_is_handed_the_configs_pad_token(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(checks, "check_padding_invariance", lambda model, config, **kwargs: seen.append(kwargs["pad_token_id"]))
    _Kit().test_padding_invariance(object)
    assert seen == [7]

"""Trainer.evaluate with a dict of eval datasets (the reference's multi-dataset evaluation: each under
``eval_<name>_``; it was a KeyError), and compute_metrics that returns no dict (a TypeError deep in the loop)."""

from __future__ import annotations

from typing import Any

import pytest
from trainer_helpers import lm_rows, tiny_gpt2

from microformers import ConfigError, Trainer
from microformers_sdk.testing import assert_close


def test_each_eval_dataset_of_a_dict_is_evaluated_under_its_name(args_factory: Any) -> None:
    first, second = lm_rows(4, seed=1), lm_rows(4, seed=2)
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(), eval_dataset={"first": first, "second": second})
    metrics = trainer.evaluate()
    assert {k for k in metrics if k.endswith("_loss")} == {"eval_first_loss", "eval_second_loss"}
    alone = trainer.evaluate(second)  # the same dataset alone gives the same loss, under the plain prefix
    assert_close(metrics["eval_second_loss"], alone["eval_loss"], atol=1e-6)
    assert_close(trainer.evaluate("first")["eval_loss"], metrics["eval_first_loss"], atol=1e-6)  # picked by name
    assert metrics["eval_first_loss"] != metrics["eval_second_loss"]  # two datasets really were evaluated
    with pytest.raises(ConfigError, match=r"^evaluate\('third'\): the Trainer's eval datasets are 'first', 'second'"):
        trainer.evaluate("third")


def test_a_dict_given_to_evaluate_uses_its_names_and_the_prefix(args_factory: Any) -> None:
    trainer = Trainer(model=tiny_gpt2(), args=args_factory())
    metrics = trainer.evaluate({"x": lm_rows(2)}, metric_key_prefix="dev")
    assert "dev_x_loss" in metrics and "dev_x_runtime" in metrics


def test_compute_metrics_must_return_a_dict(args_factory: Any) -> None:
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(), eval_dataset=lm_rows(2), compute_metrics=lambda p: 0.5)
    with pytest.raises(ConfigError, match=r"^compute_metrics returned 0\.5; it must return a dict of metric name"):
        trainer.evaluate()

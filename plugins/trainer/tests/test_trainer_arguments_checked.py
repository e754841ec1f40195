"""Trainer(...) arguments of the wrong kind are ConfigErrors naming the argument when the Trainer is made (issue 42
audit): they were AttributeErrors or TypeErrors at the first step or evaluation (a model name instead of a model,
a dict of settings, a non-callable compute_metrics, an optimizer that is not one, a resume_from_checkpoint number);
an untokenized dataset is named by the collator instead of the model's "needs input_ids"."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from trainer_helpers import lm_rows, tiny_gpt2

from microformers import ConfigError, InputError, Trainer
from microformers_trainer.data_collator import default_data_collator


def _refused(expected: str, **kwargs: Any) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}"):
        Trainer(**kwargs)


def test_a_model_that_is_not_a_module_is_named(args_factory: Any) -> None:
    _refused(
        "Trainer(model=...) is 'gpt2', not a torch module; load the model first", model="gpt2", args=args_factory()
    )
    _refused("model_init() returned 'gpt2', not a torch module", model_init=lambda: "gpt2", args=args_factory())


def test_settings_that_are_not_training_arguments_are_named() -> None:
    _refused("Trainer(args={'output_dir': 'x'}): pass a TrainingArguments", model=tiny_gpt2(), args={"output_dir": "x"})


@pytest.mark.parametrize(
    "name", ["data_collator", "model_init", "compute_loss_func", "compute_metrics", "preprocess_logits_for_metrics"]
)
def test_a_function_argument_that_is_not_callable_is_named(args_factory: Any, name: str) -> None:
    _refused(f"Trainer({name}=5): pass a function (or None)", model=tiny_gpt2(), args=args_factory(), **{name: 5})


def test_optimizers_of_the_wrong_kind_are_named(args_factory: Any) -> None:
    model = tiny_gpt2()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _refused("Trainer(optimizers=5): pass a pair (optimizer, lr_scheduler)", model=model, args=args_factory(),
             optimizers=5)  # fmt: skip
    _refused("Trainer(optimizers=(5, ...)): the optimizer must be a torch.optim.Optimizer", model=model,
             args=args_factory(), optimizers=(5, None))  # fmt: skip
    _refused("Trainer(optimizers=(..., 'cosine')): the scheduler needs a step() method", model=model,
             args=args_factory(), optimizers=(optimizer, "cosine"))  # fmt: skip
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    assert Trainer(model=model, args=args_factory(), optimizers=(optimizer, scheduler)).optimizer is optimizer


def test_a_resume_from_checkpoint_that_is_no_folder_is_named(args_factory: Any) -> None:
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(max_steps=1), train_dataset=lm_rows(4))
    with pytest.raises(ConfigError, match=r"^train\(resume_from_checkpoint=5\): pass a checkpoint folder, True"):
        trainer.train(resume_from_checkpoint=5)
    assert trainer.state.global_step == 0  # refused before any step


def test_text_where_token_ids_belong_is_named_by_the_collator() -> None:
    with pytest.raises(InputError, match=r"feature 'input_ids' is text \('abc'\), not token ids; tokenize"):
        default_data_collator([{"input_ids": "abc", "labels": [1, 2]}])
    # other text columns are still left out, as the reference does
    batch = default_data_collator([{"input_ids": [1, 2], "text": "ab"}, {"input_ids": [3, 4], "text": "cd"}])
    assert list(batch) == ["input_ids"] and batch["input_ids"].tolist() == [[1, 2], [3, 4]]

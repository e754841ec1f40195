"""TrainingArguments refuses values of the wrong type or out of range when it is made (issue 42 audit): a string
"no" flag would be truthy, a string learning rate, a beta of 1.5 or a NaN norm failed only at the first step (or
never), a negative seed at set_seed, an output_dir that is a file at the first save."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from microformers import ConfigError, TrainingArguments

CASES: list[tuple[str, Any, str]] = [
    ("gradient_checkpointing", "no", "use True or False"),
    ("bf16", "yes", "use True or False"),
    ("torch_compile", 1, "use True or False"),
    ("learning_rate", "3e-5", "use a number >= 0"),
    ("learning_rate", float("inf"), "use a number >= 0"),
    ("weight_decay", -0.1, "use a number >= 0"),
    ("num_train_epochs", -1, "use a number >= 0"),
    ("adam_beta1", 1.5, "use a number from 0 to 1 (1 excluded)"),
    ("adam_beta2", 1.0, "use a number from 0 to 1 (1 excluded)"),
    ("adam_epsilon", -1e-8, "use a number >= 0"),
    ("max_grad_norm", float("nan"), "use any finite number"),
    ("label_smoothing_factor", 2.0, "use a number from 0 to 1"),
    ("warmup_ratio", 1.5, "use a number from 0 to 1"),
    ("seed", -1, "use an integer from 0 to 4,294,967,295"),
    ("seed", 2**32, "use an integer from 0 to 4,294,967,295"),
    ("seed", 4.0, "use an integer from 0 to 4,294,967,295"),
    ("data_seed", "1", "use an integer from 0 to 4,294,967,295"),
    ("dataloader_num_workers", -1, "use an integer from 0 to 1,024"),
    ("max_steps", -2, "use an integer from -1 to "),
    ("label_names", "labels", "use a list of batch keys, e.g. ['labels']"),  # was read one character at a time
]


@pytest.mark.parametrize(("name", "value", "wanted"), CASES)
def test_a_setting_of_the_wrong_type_or_range_is_refused_naming_it(
    tmp_path: Path, name: str, value: Any, wanted: str
) -> None:
    expected = f"TrainingArguments({name}={value!r}): {wanted}"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}"):
        TrainingArguments(output_dir=str(tmp_path), **{name: value})


def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "out"
    file.write_text("x")
    with pytest.raises(ConfigError, match=r"output_dir=.*out'\): that is a file; name a folder$"):
        TrainingArguments(output_dir=str(file))


def test_the_reference_conventions_and_numpy_numbers_are_kept(tmp_path: Path) -> None:
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_grad_norm=None,  # no clipping
        save_total_limit=0,  # keeps every checkpoint
        max_steps=-1,  # epochs decide
        learning_rate=np.float32(1e-3),
        seed=np.int64(7),
        warmup_steps=0.1,  # a ratio of the run
        label_smoothing_factor=1,
    )
    assert (args.max_grad_norm, args.save_total_limit, args.seed, args.get_warmup_steps(100)) == (None, 0, 7, 10)

"""The ``args_factory`` fixture: TrainingArguments for tiny test runs in a temporary folder."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)

# the tests share tiny models from trainer_helpers.py (pytest runs with --import-mode=importlib)
sys.path.insert(0, str(Path(__file__).parent))
# comet_ml writes an experiment it still holds at exit into ./.cometml-runs: never into the checkout
os.environ.setdefault("COMET_OFFLINE_DIRECTORY", tempfile.mkdtemp(prefix="comet-offline-"))


@pytest.fixture
def args_factory(tmp_path: Any) -> Any:
    from microformers import TrainingArguments

    def make(**kwargs: Any) -> Any:
        defaults = {
            "output_dir": str(tmp_path / "out"),
            "per_device_train_batch_size": 4,
            "per_device_eval_batch_size": 4,
            "learning_rate": 1e-2,
            "num_train_epochs": 1,
            "logging_steps": 1,
            "save_strategy": "no",
            "disable_tqdm": True,
            "report_to": "none",
        }
        return TrainingArguments(**{**defaults, **kwargs})

    return make

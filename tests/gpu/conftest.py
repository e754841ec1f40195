"""CUDA checks: every test here is marked ``gpu`` and skipped ("no CUDA device") where torch sees no GPU.

Run them on a GPU machine with ``python -m pytest -q tests/gpu -m gpu`` (scripts/gpu-check.sh does).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # families.py, next to the tests


@pytest.hookimpl(tryfirst=True)  # before -m gpu selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    has_cuda = torch.cuda.is_available()
    for item in items:
        if here not in Path(str(item.fspath)).parents:
            continue
        item.add_marker(pytest.mark.gpu)
        if not has_cuda:
            item.add_marker(pytest.mark.skip(reason="no CUDA device"))


@pytest.fixture
def device() -> str:
    return "cuda"

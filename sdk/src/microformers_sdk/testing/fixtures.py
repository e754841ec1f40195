"""pytest fixtures shared by the distributions' test suites (import them into a ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """One intra-op thread for each test module that imports this into its ``conftest.py``.

    Tiny models gain nothing from a second thread, and under pytest-xdist two workers share the
    machine's cores: a product split over two threads then waits at every barrier for a descheduled
    one (the quantized SmolLM2 decoding tests took 8x longer). Tests of threading set it themselves.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

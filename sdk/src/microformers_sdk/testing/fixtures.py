"""pytest fixtures and markers shared by the distributions' test suites (import them into a ``conftest.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from ..native import unavailable_reason

# The thread count tests run their models with: 1 by default, ``MICROFORMERS_TEST_THREADS=2`` (what
# ``make test-portability`` sets for one leg) to run the same assertions on ATen's threaded paths.
TEST_THREADS = int(os.environ.get("MICROFORMERS_TEST_THREADS", "1"))


def needs_native_ops() -> pytest.MarkDecorator:
    """A marker for tests of the native (C++) ops themselves: skipped, with the reason, where they cannot
    run (``MICROFORMERS_NATIVE=0``, a CPU without AVX2/FMA/F16C, no C++ compiler); CI's main run has them."""
    reason = unavailable_reason()
    return pytest.mark.skipif(reason is not None, reason=f"native ops unavailable: {reason}")


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """:data:`TEST_THREADS` (one by default) intra-op threads for each test module that imports this into
    its ``conftest.py``.

    Tiny models gain nothing from a second thread, and under pytest-xdist two workers share the
    machine's cores: a product split over two threads then waits at every barrier for a descheduled
    one (the quantized SmolLM2 decoding tests took 8x longer). Tests of threading set it themselves.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(TEST_THREADS)
    yield
    torch.set_num_threads(threads)

"""Skip markers of the quantization tests: what needs the C++ kernels, what needs a C++ compiler for torch.compile."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from microformers_sdk.testing import needs_native_ops

_TORCH_KERNELS = os.environ.get("MICROFORMERS_QUANT_KERNELS", "").lower() == "torch"


def needs_quant_kernels(test: Callable[..., Any]) -> Callable[..., Any]:
    """For tests of the C++ kernels themselves (``mfquant::*``, the native decoder step): skipped, with the reason,
    where they cannot run (the SDK's reasons, or ``MICROFORMERS_QUANT_KERNELS=torch``)."""
    test = needs_native_ops()(test)
    reason = "MICROFORMERS_QUANT_KERNELS=torch turns the C++ kernels off"
    return pytest.mark.skipif(_TORCH_KERNELS, reason=reason)(test)


# torch.compile on the CPU generates and compiles C++
needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "c++")) is None,
    reason=f"torch.compile on the CPU needs a C++ compiler ({os.environ.get('CXX', 'c++')!r} is not on PATH)",
)

"""C++ operators built on first use, and the SDK's own: ``mfsdk::few_rows_linear`` (csrc/few_rows.cpp).

:func:`build_ops` compiles a C++ source that registers ``torch.ops`` with ``TORCH_LIBRARY`` (gcc,
``-O3 -march=native -fopenmp``) into torch's extension cache (``TORCH_EXTENSIONS_DIR``, default
``~/.cache/torch_extensions``) the first time a machine needs it; later processes load the cached
library in milliseconds. Nothing is built at ``pip install`` time. ``-fopenmp``: ATen's
``parallel_for`` is an inline OpenMP region in the headers, so without it every op runs on one
thread; the library's ``libgomp.so.1`` resolves to the copy torch has loaded (one thread pool).

:func:`few_rows_linear` is ``F.linear`` for one to :data:`FEW_ROWS_MAX` float32 input rows
(decoding), or None where the op is not available (no compiler, or ``MICROFORMERS_NATIVE=0``):
callers then use torch's own products.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import torch

__all__ = ["FEW_ROWS_MAX", "build_ops", "few_rows_linear"]

logger = logging.getLogger("microformers")

# Input rows up to which few_rows_linear is used: above, the rows share each weight row in a real
# GEMM (MKL), which wins once enough rows amortise its packing (prefill).
FEW_ROWS_MAX = 16

_lock = threading.Lock()
_built: dict[str, bool] = {}


def build_ops(name: str, source: Path) -> Exception | None:
    """Compile and load ``source`` as the extension ``name`` (once per process); the error, or None."""
    try:
        from torch.utils.cpp_extension import load

        load(
            name=name,
            sources=[str(source)],
            extra_cflags=["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, unsupported platform
        return exc
    return None


def _few_rows_available() -> bool:
    with _lock:
        if "few_rows" not in _built:
            if os.environ.get("MICROFORMERS_NATIVE", "1") == "0":
                _built["few_rows"] = False
            elif hasattr(torch.ops, "mfsdk") and hasattr(torch.ops.mfsdk, "few_rows_linear"):
                _built["few_rows"] = True
            else:
                error = build_ops("microformers_sdk_ops", Path(__file__).with_name("csrc") / "few_rows.cpp")
                if error is not None:
                    logger.debug("microformers-sdk: native few-row products unavailable (%s); using torch's", error)
                _built["few_rows"] = error is None
        return _built["few_rows"]


_EMPTY = torch.empty(0)


def few_rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``F.linear(x, weight, bias)`` for contiguous float32 CPU ``x`` of 1 to ``FEW_ROWS_MAX`` rows and a
    contiguous float32 ``weight``, summed in one fixed order per output (the same alone or in a batch);
    None where the native op is unavailable."""
    available = _built.get("few_rows")  # decided once: no lock on the decode path after the first call
    if not (available if available is not None else _few_rows_available()):
        return None
    rows = x.numel() // weight.shape[1]
    out = torch.ops.mfsdk.few_rows_linear(x.reshape(rows, weight.shape[1]), weight, _EMPTY if bias is None else bias)
    return out.view(*x.shape[:-1], weight.shape[0])

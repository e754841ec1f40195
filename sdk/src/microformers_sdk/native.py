"""C++ operators built on first use, and the SDK's own: ``mfsdk::few_rows_linear`` (csrc/few_rows.cpp) and
``mfsdk::float_decoder_step`` (csrc/decoder_step.cpp, a whole float32 decoder step built on the first).

:func:`build_ops` compiles a C++ source that registers ``torch.ops`` with ``TORCH_LIBRARY`` into
torch's extension cache (``TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``) the first
time a machine needs it; later processes load the cached library in milliseconds. Nothing is built
at ``pip install`` time.

The binary targets one named instruction set, never ``-march=native``: ``avx2`` is x86-64 with
AVX2, FMA and F16C (``-mavx2 -mfma -mf16c``), and the extension's name carries it
(``microformers_sdk_ops_avx2``), so a cache shared between machines, or baked into an image, can
only hand a CPU a binary built for what it has. :func:`native_isa` checks at run time that this CPU
has the features (``/proc/cpuinfo``, narrowed by ``ATEN_CPU_CAPABILITY`` the way torch's own
kernels are); where it has not (an older x86, ARM, macOS, whose clang has no ``-fopenmp``), nothing
is built and callers use torch's own products (BLAS), after one log line. ``-fopenmp``: ATen's
``parallel_for`` is an inline OpenMP region in the headers, so without it every op runs on one
thread; the library's ``libgomp.so.1`` resolves to the copy torch has loaded (one thread pool).

:func:`few_rows_linear` is ``F.linear`` for one to :data:`FEW_ROWS_MAX` float32 input rows
(decoding), or None where the op is not available (no compiler, a CPU without the instruction set,
or ``MICROFORMERS_NATIVE=0``): callers then use torch's own products.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from microformers.errors import ConfigError

from .masks import exporting_graph

__all__ = [
    "FEW_ROWS_MAX", "INCLUDE_DIR", "ISA_TARGETS", "WIDE_FROM_ROWS", "NativeUnavailable", "build_ops",
    "cached_library", "causal_attention", "cpu_flags", "eager_cpu_inference", "extension_report", "few_rows_linear",
    "many_rows_linear", "native_isa", "native_ops_available", "native_prompt_products", "native_report", "rms_norm",
    "rotate_half_split", "silu_mul_", "unavailable_reason", "wide_products_available",
]  # fmt: skip

logger = logging.getLogger("microformers")

# Input rows up to which few_rows_linear is used: above, the rows share each weight row in a real
# GEMM (MKL), which wins once enough rows amortise its packing (prefill). SmolLM2's products, one thread
# (Zen 4, 2026-11-28): 1.5x MKL at 16 rows, 1.4x at 32, 1.1x at 64, on par at 128-512.
FEW_ROWS_MAX = 128

# What microformers_sdk_ops registers (a process that loaded an older build lacks some: it builds again)
_OPS = (
    "few_rows_linear",
    "many_rows_linear",
    "use_wide_products",
    "float_decoder_step",
    "rms_norm",
    "rotate_half_split",
    "causal_attention",
    "silu_mul_",
)
_lock = threading.Lock()
_built: dict[str, bool] = {}


# instruction set -> (the CPU flags it needs, as /proc/cpuinfo names them; the compiler flags)
ISA_TARGETS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "avx2": (frozenset({"avx2", "fma", "f16c"}), ("-mavx2", "-mfma", "-mf16c")),
}
# ATen's capability (torch.backends.cpu.get_cpu_capability(), ATEN_CPU_CAPABILITY) -> the targets it admits
_ATEN_ADMITS: dict[str, frozenset[str]] = {"AVX2": frozenset({"avx2"}), "AVX512": frozenset({"avx2"})}


class NativeUnavailable(RuntimeError):
    """The native ops cannot run on this machine; the message says why."""


def _cpuinfo_field(name: str) -> str:
    """The first ``name`` line's value in Linux's /proc/cpuinfo ("" elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of this CPU as Linux reports them (empty elsewhere)."""
    return frozenset(_cpuinfo_field("flags").split())


def native_isa() -> tuple[str | None, str]:
    """The instruction set the native ops are built for on this machine, or None, and why."""
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in ("x86_64", "amd64"):
        return None, f"native ops are built for x86-64 Linux only (this is {sys.platform}/{machine})"
    capability = torch.backends.cpu.get_cpu_capability()
    admitted = _ATEN_ADMITS.get(capability, frozenset())
    flags = cpu_flags()
    for isa, (needed, _) in ISA_TARGETS.items():
        if isa in admitted and needed <= flags:
            return isa, f"this CPU has {', '.join(sorted(needed))}"
    missing = sorted(ISA_TARGETS["avx2"][0] - flags)
    if missing:
        return None, f"this CPU lacks {', '.join(missing)}"
    return None, f"torch runs its {capability} kernels here (ATEN_CPU_CAPABILITY)"


def unavailable_reason() -> str | None:
    """Why the native ops cannot run in this process (``MICROFORMERS_NATIVE=0``, the CPU or platform, no
    C++ compiler or ninja), without building anything; None where they can be built."""
    if os.environ.get("MICROFORMERS_NATIVE", "1") == "0":
        return "MICROFORMERS_NATIVE=0 turns the native ops off"
    isa, why = native_isa()
    if isa is None:
        return why
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler!r} is not on PATH)"
    if shutil.which("ninja") is None:  # torch.utils.cpp_extension builds with it
        return "no ninja on PATH (pip install ninja)"
    return None


def build_ops(name: str, source: Path | Sequence[Path], include_dirs: Sequence[Path] = ()) -> Exception | None:
    """Compile and load ``source`` (one C++ file or several) as the extension ``name`` for this CPU's
    instruction set (once per process); the error (a :class:`NativeUnavailable` where the CPU or platform
    has no target), or None. ``include_dirs`` are searched for ``#include "..."`` (:data:`INCLUDE_DIR`: the
    SDK's ``decoder_layers.h``). Headers (``*.h``) beside the sources and in ``include_dirs`` are part of what
    makes a cached build current: torch's cache compares only the sources, so their digest goes into the
    compiler flags."""
    sources = [source] if isinstance(source, Path) else list(source)
    isa, why = native_isa()
    if isa is None:
        return NativeUnavailable(why)
    first_build = cached_library(name) is None
    if first_build and unavailable_reason() is None:
        # the one moment a user waits with nothing on screen: say so (torch's compiler output only in debug)
        print(f"microformers: building native kernels ({name}) for this CPU ({isa}), once; this takes up to a "
              "minute...", file=sys.stderr, flush=True)  # fmt: skip
    started = time.perf_counter()
    try:
        from torch.utils.cpp_extension import load

        load(
            name=f"{name}_{isa}",
            sources=[str(path) for path in sources],
            extra_cflags=[*_CFLAGS, *ISA_TARGETS[isa][1], *_headers_flag(sources, include_dirs)],
            extra_include_paths=[str(path) for path in include_dirs],
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=logger.isEnabledFor(logging.DEBUG),
        )
    except Exception as exc:  # no compiler, no ninja, unsupported platform
        return exc
    if first_build:
        print(f"microformers: built {name} in {time.perf_counter() - started:.0f} s (cached for later runs)",
              file=sys.stderr, flush=True)  # fmt: skip
    return None


_CFLAGS = ("-O3", "-ffp-contract=off", "-fopenmp")


def _headers_flag(sources: list[Path], include_dirs: Sequence[Path] = ()) -> list[str]:
    """``-DMF_HEADERS_DIGEST=...`` of the headers beside ``sources`` and in ``include_dirs`` (none: no flag)."""
    folders = {path.parent for path in sources} | set(include_dirs)
    headers = sorted({header for folder in folders for header in folder.glob("*.h")})
    if not headers:
        return []
    digest = hashlib.sha256(b"".join(header.read_bytes() for header in headers)).hexdigest()[:16]
    return [f"-DMF_HEADERS_DIGEST={digest}"]


def _build_root() -> Path:
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())


def cached_library(name: str) -> Path | None:
    """The built library of extension ``name`` for this CPU's instruction set in torch's extension cache, or
    None where it has not been built yet (nothing is built here)."""
    isa, _ = native_isa()
    if isa is None:
        return None
    full = f"{name}_{isa}"
    root = _build_root()
    for candidate in (root / full / f"{full}.so", *root.glob(f"*/{full}/{full}.so")):
        if candidate.is_file():
            return candidate
    return None


def extension_report(name: str, loaded: bool | None) -> str:
    """One line on extension ``name``: unavailable (why), not built yet, built, and whether this process uses it
    (``loaded``: None where the caller cannot tell without building)."""
    reason = unavailable_reason()
    if reason is not None:
        return f"{name}: not used ({reason}); torch's own kernels run instead"
    library = cached_library(name)
    if library is None:
        return f"{name}: not built yet (built on first use, once, up to a minute)"
    use = "" if loaded is None else ("; loaded in this process" if loaded else "; used once a model needs it")
    return f"{name}: built ({library}){use}"


def native_report() -> list[str]:
    """``microformers env``'s lines for the SDK's native ops: the instruction set and the extension's state."""
    isa, why = native_isa()
    target = f"instruction set: {isa} ({why})" if isa else f"instruction set: none ({why})"
    loaded = hasattr(torch.ops, "mfsdk") and hasattr(torch.ops.mfsdk, "few_rows_linear")
    return [target, extension_report("microformers_sdk_ops", loaded)]


def _few_rows_available() -> bool:
    with _lock:
        if "few_rows" not in _built:
            if os.environ.get("MICROFORMERS_NATIVE", "1") == "0":
                _built["few_rows"] = False
            elif hasattr(torch.ops, "mfsdk") and all(hasattr(torch.ops.mfsdk, op) for op in _OPS):
                _built["few_rows"] = True
            else:
                error = build_ops(
                    "microformers_sdk_ops", [_CSRC / "few_rows.cpp", _CSRC / "decoder_step.cpp", _CSRC / "layers.cpp"]
                )
                if error is not None:
                    logger.info("microformers-sdk: native few-row products unavailable (%s); using torch's", error)
                _built["few_rows"] = error is None
            if _built["few_rows"]:
                torch.ops.mfsdk.use_wide_products(WIDE_FROM_ROWS if _WIDE_ISA else 0)
        return _built["few_rows"]


_CSRC = Path(__file__).with_name("csrc")
# Headers other extensions build with (decoder_layers.h: the decoder step's layer loop, norms, rotary, attention)
INCLUDE_DIR = _CSRC
_EMPTY = torch.empty(0)


def native_ops_available() -> bool:
    """Whether the SDK's native ops (``mfsdk::few_rows_linear``, ``mfsdk::float_decoder_step``) run in this
    process, building them on the first call where they can be built."""
    available = _built.get("few_rows")
    return available if available is not None else _few_rows_available()


def few_rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``F.linear(x, weight, bias)`` for contiguous float32 CPU ``x`` of 1 to ``FEW_ROWS_MAX`` rows and a
    contiguous float32 ``weight``, summed in one fixed order per output: the same in any batch of two or more
    rows (8-lane accumulators), except that where :func:`wide_products_available` batches of
    :data:`WIDE_FROM_ROWS` rows or more take the 16-lane order of :func:`many_rows_linear` (faster from about that
    many rows), the same in each of them; a row alone in an order of its own, equal up to rounding. None where the
    native op is unavailable."""
    if not native_ops_available():  # decided once: no lock on the decode path after the first call
        return None
    rows = x.numel() // weight.shape[1]
    out = torch.ops.mfsdk.few_rows_linear(x.reshape(rows, weight.shape[1]), weight, _EMPTY if bias is None else bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def _wide_isa() -> bool:
    return (
        os.environ.get("MICROFORMERS_WIDE_PRODUCTS", "1") != "0"
        and torch.backends.cpu.get_cpu_capability() == "AVX512"
        and "avx512f" in cpu_flags()
    )


# Whether this CPU runs torch's AVX-512 kernels and has AVX-512F (read once; ``ATEN_CPU_CAPABILITY=avx2`` or
# ``MICROFORMERS_WIDE_PRODUCTS=0`` turn the 16-lane products off).
_WIDE_ISA = _wide_isa()


# From this many rows on, where wide_products_available(), few_rows_linear and the native step sum in the 16-lane order
# of many_rows_linear: from there its tiles are the faster. SmolLM2's products, one thread, weights streamed from
# memory: on an Emerald Rapids core 8 rows 43 against 49 ms, 16 rows 48 against 60, 32 rows 68 against 110, 4 rows
# the 8-lane tiles faster (36 against 40; 2026-11-29); on a Zen 4 core, measured before the 16-lane tiles pulled
# their next block in through every tile, from about 48 rows (64 rows 1.05x, 128 rows 1.1x).
def _wide_from_rows() -> int:
    return 8 if _cpuinfo_field("vendor_id") == "GenuineIntel" else 48


WIDE_FROM_ROWS = _wide_from_rows()


def wide_products_available() -> bool:
    """Whether :func:`many_rows_linear` runs here: the native ops build, and the CPU has AVX-512 where torch uses it."""
    return _WIDE_ISA and native_ops_available()


def _native_prompt_products() -> bool:
    setting = os.environ.get("MICROFORMERS_PROMPT_PRODUCTS", "auto")
    if setting not in ("auto", "native", "torch"):
        raise ConfigError(
            f"microformers: MICROFORMERS_PROMPT_PRODUCTS={setting!r}; use 'auto' (the default), 'native' or 'torch'"
        )
    if setting != "auto":
        return setting == "native"
    # MKL runs its AVX-512 sgemm on Intel CPUs (SmolLM2's products at 512 rows 140-160 GFLOP/s on one Emerald Rapids
    # core, near its peak; the 16-lane tiles 112-143 there) but its AVX2 code on AMD ones (~80 on a Zen 4 core,
    # where the 16-lane tiles reach 93-97).
    return _cpuinfo_field("vendor_id") != "GenuineIntel" or not torch.backends.mkl.is_available()


# Whether products of more than FEW_ROWS_MAX rows (a prompt) take many_rows_linear here rather than torch's
# (read once; MICROFORMERS_PROMPT_PRODUCTS=native or torch decides it instead of the CPU's vendor).
_NATIVE_PROMPT_PRODUCTS = _native_prompt_products()


def native_prompt_products() -> bool:
    """Whether a product of more than :data:`FEW_ROWS_MAX` rows (a prompt) takes :func:`many_rows_linear` here:
    where it runs (:func:`wide_products_available`) and is faster than torch's ``sgemm``, which on Intel CPUs is
    MKL's AVX-512 code and at those sizes the faster of the two."""
    return _NATIVE_PROMPT_PRODUCTS and wide_products_available()


def many_rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``F.linear(x, weight, bias)`` for contiguous float32 CPU ``x`` of any number of rows (meant for more than
    ``FEW_ROWS_MAX``: a prompt) and a contiguous float32 ``weight``, with 16-lane AVX-512 tiles; each output summed
    in one order (16 lanes over the inner dimension, then the lanes), whatever the number of rows. None where
    :func:`wide_products_available` is False.

    Against MKL's ``sgemm`` (which runs its AVX2 code on AMD CPUs): SmolLM2's products at 512 rows 1.15x
    faster on a Zen 4 core, and 3x closer to the float64 result (1.8e-5 against 5.1e-5 at 300 x 576 x 1536). On
    Intel CPUs MKL runs its AVX-512 code, as fast at 512 rows and faster at 2,048 (:func:`native_prompt_products`)."""
    if not wide_products_available():
        return None
    rows = x.numel() // weight.shape[1]
    out = torch.ops.mfsdk.many_rows_linear(x.reshape(rows, weight.shape[1]), weight, _EMPTY if bias is None else bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """RMSNorm of contiguous float32 CPU ``x`` (rows along the last axis) with a float32 ``weight``, in one pass
    per row (the native decoder step's norm; ATen takes six passes); None where the native ops are unavailable."""
    if not native_ops_available():
        return None
    return torch.ops.mfsdk.rms_norm(x, weight.contiguous(), eps)


def silu_mul_(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor | None:
    """``gate = silu(gate) * up`` in place, in one pass per row, for contiguous float32 CPU tensors of one shape,
    with the native decoder step's SiLU (its exp within a few ulp of the exact one, where torch's takes its own); the
    values of a row do not depend on the other rows. None where the native ops are unavailable or the tensors do
    not fit."""
    if not (
        gate.dtype == up.dtype == torch.float32
        and gate.shape == up.shape
        and gate.dim() >= 1
        and gate.is_contiguous()
        and up.is_contiguous()
        and native_ops_available()
    ):
        return None
    return torch.ops.mfsdk.silu_mul_(gate, up)


def rotate_half_split(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor | None:
    """``x * cos + rotate_half(x) * sin`` in one pass, the same values to the bit: ``x`` float32 [batch, heads,
    tokens, head_dim] on the CPU with contiguous rows, ``cos``/``sin`` [batch or 1, 1, tokens, head_dim] (a
    model's rotary tables unsqueezed for the heads). None where the native ops are unavailable or the shapes differ.
    """
    if not (
        x.dtype == cos.dtype == sin.dtype == torch.float32
        and x.dim() == cos.dim() == 4
        and cos.shape == sin.shape
        and cos.shape[1] == 1
        and cos.shape[0] in (1, x.shape[0])
        and cos.shape[2:] == x.shape[2:]
        and x.shape[-1] % 2 == 0
        and x.stride(-1) == 1
        and native_ops_available()
    ):
        return None
    return torch.ops.mfsdk.rotate_half_split(x, cos.squeeze(1).contiguous(), sin.squeeze(1).contiguous())


def eager_cpu_inference(x: torch.Tensor) -> bool:
    """Whether a native op may compute on ``x``: a CPU tensor, no gradients, not traced, exported or compiled."""
    return (
        x.device.type == "cpu"
        and not torch.is_grad_enabled()
        and not torch.jit.is_tracing()
        and not torch.compiler.is_compiling()
        and not exporting_graph()
    )


def causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor | None:
    """Causal attention of a prompt over itself: ``query`` [batch, heads, tokens, head_dim] and ``key``/``value``
    [batch, kv_heads, tokens, head_dim] (heads a multiple of kv_heads, a query head reading key/value head
    ``h // (heads // kv_heads)``), float32 on the CPU with ``head_dim`` a multiple of 16 and contiguous, in blocks of
    32 queries x 64 keys up to the diagonal with a running softmax (AVX-512); the result laid out as torch's SDPA
    lays it out. None where :func:`wide_products_available` is False or the shapes do not fit.

    torch's CPU flash kernel computes the scores above the diagonal of its 512-key blocks before masking them:
    SmolLM2's attention at 2,048 tokens 1.3x, at 512 1.5x faster on a Zen 4 core (before 2026-11-29's rework),
    1.4x and 2x on an Emerald Rapids core; the same result up to rounding, and a NaN score gives NaN as there."""
    if not (
        wide_products_available()
        and query.dtype == key.dtype == value.dtype == torch.float32
        and query.dim() == key.dim() == value.dim() == 4
        and query.shape[-1] % 16 == 0
        and query.shape[-1] > 0
        and all(t.stride(-1) == 1 for t in (query, key, value))
        and key.shape[1] > 0
        and query.shape[1] % key.shape[1] == 0
    ):
        return None
    return torch.ops.mfsdk.causal_attention(query, key, value, scale)

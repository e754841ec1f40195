"""The CPU kernels: ``mfquant::q4_linear``, ``mfquant::q8_linear`` and friends (csrc/qlinear.cpp), built on first use.

The C++ source is compiled once per machine by :func:`microformers_sdk.native.build_ops` (gcc,
``-O3 -mavx2 -mfma -mf16c -fopenmp``, output features split over torch's threads) into torch's
extension cache under a name that carries the instruction set; later processes load the cached
library in milliseconds. On a CPU without AVX2/FMA/F16C (or on ARM, or macOS) nothing is built and
the torch path below runs. Both ops have fake (meta) implementations, so ``torch.compile`` traces
through them. Without a compiler (or with ``MICROFORMERS_QUANT_KERNELS=torch`` or ``MICROFORMERS_NATIVE=0``), on a CPU
without the instruction set, and for tensors on another device than the CPU (CUDA), the same maths
runs in plain torch — correct, but it de-quantises the weight on every call — after one warning
(:func:`warn_slow_path`) that says so and what to do.

Layouts (see csrc/qlinear.cpp): q4 ``qweight`` uint8 ``[N, K/2]`` in ggml's nibble order (byte j of
each 16-byte block holds value j low, value j+16 high), value = ``scale * q + min`` with float16
``scales``/``mins`` ``[N, K/group]``; q8 ``qweight`` int8 ``[N, K]``, value = ``scale * q``, float32
``scales`` ``[N, K/group]``.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("microformers")

# Inputs with at least this many rows (prefill) de-quantise tiles of the weight and use a float
# matrix product; fewer rows go through the register-blocked row kernels. Chosen by measurement
# (``bench/quant.py --layers``).
GEMM_MIN_ROWS = 16

_lock = threading.Lock()
_state: dict[str, bool] = {}
# (weight bits, activation bits) -> the native op, filled once the kernels are built: resolving
# ``torch.ops.mfquant.<name>`` on every call cost about as much as a small layer's product
_ops: dict[tuple[int, int | str], Any] = {}
_warned: set[str] = set()


def warn_slow_path(device: torch.device) -> None:
    """One warning per process and device type: quantized layers on ``device`` have no native kernel."""
    if device.type == "meta" or device.type in _warned:
        return  # meta tensors hold no values: generate() refuses them with its own error
    _warned.add(device.type)
    logger.warning(
        "microformers-quant: quantized layers on %s have no native kernel (the kernels are CPU code), so every "
        "call de-quantises its weight in torch (correct but slow) and generate() cannot decode through the "
        "native step. For speed, run the quantized model on the CPU (model.to('cpu')), or load the model "
        "without quantization_config in bfloat16 on this device.",
        device,
    )


def native_available() -> bool:
    """Build (first time on this machine) and load the C++ kernels; False if that is impossible."""
    with _lock:
        if "ok" not in _state:
            _state["ok"] = _build()
        return _state["ok"]


def environment_report() -> list[str]:
    """``microformers env``'s line on the quantized-layer kernels (nothing is built here)."""
    from microformers_sdk.native import extension_report

    if os.environ.get("MICROFORMERS_QUANT_KERNELS", "").lower() == "torch":
        return ["microformers_quant_kernels: not used (MICROFORMERS_QUANT_KERNELS=torch); layers de-quantise in torch"]
    return [extension_report("microformers_quant_kernels", bool(_ops) or None)]


def _build() -> bool:
    if (
        os.environ.get("MICROFORMERS_QUANT_KERNELS", "").lower() == "torch"
        or os.environ.get("MICROFORMERS_NATIVE") == "0"
    ):
        return False
    if not (hasattr(torch.ops, "mfquant") and hasattr(torch.ops.mfquant, "q4_linear")) and not _compile():
        return False
    for bits in (4, 8):
        for act_bits, suffix in ((32, ""), (16, "_i16"), (8, "_i8")):
            _ops[bits, act_bits] = getattr(torch.ops.mfquant, f"q{bits}_linear{suffix}")
        _ops[bits, "many"] = getattr(torch.ops.mfquant, f"q{bits}_linear_many")
        _ops[bits, "x8"] = getattr(torch.ops.mfquant, f"q{bits}_linear_x8")
    return True


def _compile() -> bool:
    from microformers_sdk.native import INCLUDE_DIR, NativeUnavailable, build_ops

    source = Path(__file__).with_name("csrc") / "qlinear.cpp"
    exc = build_ops("microformers_quant_kernels", source, include_dirs=[INCLUDE_DIR])
    if isinstance(exc, NativeUnavailable):  # a CPU or platform without the instruction set
        logger.warning(
            "microformers-quant: no native kernels here (%s): quantized layers de-quantise their weights in "
            "torch on every call (correct but slow) and generate() decodes without the native step; a float "
            "model (no quantization_config) is usually faster on this machine",
            exc,
        )
        return False
    if exc is not None:  # no compiler, no ninja
        logger.warning(
            "microformers-quant: could not build the C++ kernels (%s: %s); quantized layers fall back to "
            "de-quantising in torch (correct but slow). Install gcc/g++ and ninja for the fast path.",
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )
        return False
    _register_fakes()
    return True


def _register_fakes() -> None:
    def q4_fake(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group: int, *_: int):
        return x.new_empty((*x.shape[:-1], qweight.shape[0]))

    def q8_fake(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group: int, *_: int):
        return x.new_empty((*x.shape[:-1], qweight.shape[0]))

    def dequantize_fake(qweight: torch.Tensor, scales: torch.Tensor, *rest: object):
        return scales.new_empty((qweight.shape[0], scales.shape[1] * int(rest[-1])), dtype=torch.float32)

    def many_fake(x: torch.Tensor, qweights: list[torch.Tensor], *_: object) -> list[torch.Tensor]:
        return [x.new_empty((*x.shape[:-1], qweight.shape[0])) for qweight in qweights]

    for suffix in ("", "_i8", "_i16"):
        torch.library.register_fake(f"mfquant::q4_linear{suffix}")(q4_fake)
        torch.library.register_fake(f"mfquant::q8_linear{suffix}")(q8_fake)
    for bits in (4, 8):
        torch.library.register_fake(f"mfquant::q{bits}_linear_many")(many_fake)
        torch.library.register_fake(f"mfquant::q{bits}_linear_x8")(many_fake)
    for bits in (4, 8):
        torch.library.register_fake(f"mfquant::q{bits}_dequantize")(dequantize_fake)


def dequantize_q4(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group: int) -> torch.Tensor:
    """float32 ``[N, K]`` from a q4 weight."""
    n = qweight.shape[0]
    blocks = qweight.view(n, -1, 16)
    values = torch.cat([blocks & 0x0F, blocks >> 4], dim=-1).view(n, scales.shape[1], group).float()
    return (values * scales.float().unsqueeze(-1) + mins.float().unsqueeze(-1)).view(n, -1)


def dequantize_q8(qweight: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """float32 ``[N, K]`` from a q8 weight."""
    n = qweight.shape[0]
    return (qweight.view(n, -1, group).float() * scales.unsqueeze(-1)).view(n, -1)


def interleave_rows(
    qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """The 8-row interleaved layout of the ``*_x8`` kernels (csrc/qlinear.cpp), same shapes and bytes permuted:
    each row's bytes in 4-byte chunks, chunk c of 8 consecutive rows side by side; scales/mins ``[N/8, G, 8]``."""
    n, width = qweight.shape
    out = [qweight.view(n // 8, 8, width // 4, 4).permute(0, 2, 1, 3).reshape(n, width)]
    for t in (scales, mins) if mins is not None else (scales,):
        out.append(t.view(n // 8, 8, t.shape[1]).permute(0, 2, 1).reshape(t.shape))
    return out


def plain_rows(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The inverse of :func:`interleave_rows`: the plain row-major layout."""
    n, width = qweight.shape
    out = [qweight.view(n // 8, width // 4, 8, 4).permute(0, 2, 1, 3).reshape(n, width)]
    for t in (scales, mins) if mins is not None else (scales,):
        out.append(t.view(n // 8, t.shape[1], 8).permute(0, 2, 1).reshape(t.shape))
    return out


def quantize_activations(x: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """What the integer-activation kernels compute with: ``x`` rounded to ``bits`` (8 or 16) per 32 values (one scale each)."""
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    scale = blocks.abs().amax(-1, keepdim=True) / float((1 << (bits - 1)) - 1)
    q = torch.round(blocks / torch.where(scale > 0, scale, torch.ones_like(scale)))
    return (q * scale).reshape(x.shape)


def quantize_activations_planes(x: torch.Tensor, planes: int) -> torch.Tensor:
    """What the interleaved kernels compute with: ``x`` per 32 values as ``d * q1`` (``planes`` 1: int8) or
    ``d * q1 + d / 254 * q2`` (2: the rest in a second int8 plane, int16's precision), ``d = max|x| / 127``."""
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    scale = blocks.abs().amax(-1, keepdim=True) / 127.0
    inverse = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    q = torch.round(blocks * inverse)  # as the kernel rounds: times the inverse, ties to even
    value = q * scale
    if planes == 2:
        rest = torch.round((blocks - scale * q) * (inverse * 254.0)).clamp_(-127, 127)
        value = value + rest * (scale / 254.0)
    return value.reshape(x.shape)


def _native(bits: int, act_bits: int | str, x: torch.Tensor) -> Any:
    if not x.is_cpu:  # the kernels are CPU code: CUDA tensors take the torch path
        warn_slow_path(x.device)
        return None
    op = _ops.get((bits, act_bits))
    if op is None and "ok" not in _state and native_available():
        op = _ops.get((bits, act_bits))
    return op


def q4_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group: int, act_bits: int = 32
) -> torch.Tensor:
    """``x @ W.T`` for float32 2-D ``x`` and a q4 ``W``; ``act_bits`` 8 or 16 quantizes ``x`` per 32 values first."""
    op = _native(4, act_bits, x)
    if op is not None:
        if act_bits == 32:
            return op(x, qweight, scales, mins, group, GEMM_MIN_ROWS)
        return op(x, qweight, scales, mins, group)
    if act_bits != 32:
        return _q4_integer_product(x, quantize_activations(x, act_bits), qweight, scales, mins, group)
    return torch.nn.functional.linear(x, dequantize_q4(qweight, scales, mins, group))


def _q4_integer_product(
    x: torch.Tensor,
    quantized: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    mins: torch.Tensor,
    group: int,
) -> torch.Tensor:
    """The integer-activation kernels' q4 product in torch: the minimum term meets the float sums of ``x``."""
    low = mins.float().repeat_interleave(group, dim=1)
    weight = dequantize_q4(qweight, scales, mins, group)
    return torch.nn.functional.linear(quantized, weight - low) + torch.nn.functional.linear(x, low)


def q8_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group: int, act_bits: int = 32
) -> torch.Tensor:
    """``x @ W.T`` for float32 2-D ``x`` and a q8 ``W``; ``act_bits`` 8 or 16 quantizes ``x`` per 32 values first."""
    op = _native(8, act_bits, x)
    if op is not None:
        if act_bits == 32:
            return op(x, qweight, scales, group, GEMM_MIN_ROWS)
        return op(x, qweight, scales, group)
    quantized = x if act_bits == 32 else quantize_activations(x, act_bits)
    return torch.nn.functional.linear(quantized, dequantize_q8(qweight, scales, group))


def _grouped_op(
    kind: str,
    x: torch.Tensor,
    bits: int,
    qweights: list[torch.Tensor],
    scales: list[torch.Tensor],
    mins: list[torch.Tensor] | None,
    *settings: int,
) -> list[torch.Tensor] | None:
    """The native op of ``kind`` ("many", "x8") on several weights of ``bits`` bits, or None without one."""
    op = _native(bits, kind, x)
    if op is None:
        return None
    return op(x, qweights, scales, mins, *settings) if bits == 4 else op(x, qweights, scales, *settings)


def linear_many(
    x: torch.Tensor,
    bits: int,
    qweights: list[torch.Tensor],
    scales: list[torch.Tensor],
    mins: list[torch.Tensor] | None,
    group: int,
    act_bits: int = 32,
) -> list[torch.Tensor]:
    """``[x @ W.T for W in weights]`` in one kernel call, every weight ``bits``-bit with ``x``'s input size and ``group``."""
    outs = _grouped_op("many", x, bits, qweights, scales, mins, group, act_bits, GEMM_MIN_ROWS)
    if outs is not None:
        return outs
    if bits == 4:
        assert mins is not None
        return [q4_linear(x, q, s, m, group, act_bits) for q, s, m in zip(qweights, scales, mins, strict=True)]
    return [q8_linear(x, q, s, group, act_bits) for q, s in zip(qweights, scales, strict=True)]


def linear_x8(
    x: torch.Tensor,
    bits: int,
    qweights: list[torch.Tensor],
    scales: list[torch.Tensor],
    mins: list[torch.Tensor] | None,
    group: int,
    act_bits: int,
) -> list[torch.Tensor]:
    """``[x @ W.T for W in weights]`` for weights in the interleaved layout, every input row quantized per 32
    values: ``act_bits`` 8 to int8, 16 to two int8 planes (int16's precision; see csrc/qlinear.cpp)."""
    outs = _grouped_op("x8", x, bits, qweights, scales, mins, group, act_bits)
    if outs is not None:
        return outs
    # no kernels here (another device): the same maths in torch on the plain layout
    quantized = quantize_activations_planes(x, 1 if act_bits == 8 else 2)
    outs = []
    for i, qweight in enumerate(qweights):
        if bits == 4:
            assert mins is not None
            outs.append(_q4_integer_product(x, quantized, *plain_rows(qweight, scales[i], mins[i]), group))
        else:
            outs.append(torch.nn.functional.linear(quantized, dequantize_q8(*plain_rows(qweight, scales[i]), group)))
    return outs

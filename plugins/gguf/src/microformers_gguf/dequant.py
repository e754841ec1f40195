"""Dequantising ggml tensors with torch, all blocks of a tensor at once.

Each function takes the raw bytes of a tensor viewed as ``(n_blocks, type_size)`` uint8 and writes
``(n_blocks, block_size)`` float32 values into ``out``. The float operations and their order (scale
times quant, then plus/minus the offset, each rounded to float32) follow ggml's reference
dequantisers, so results are bit-identical to ``gguf.quants.dequantize``. Block layouts are those
of ggml (``block_q4_0`` ... ``block_q6_K``); K-quant super-blocks hold 256 values. The IQ types
(``IQ1_S`` ... ``IQ4_XS``) are in :mod:`microformers_gguf.iq`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from microformers.errors import CheckpointError

from .iq import IQ_TYPES

QK_K = 256

Dequantiser = Callable[[torch.Tensor, torch.Tensor], None]


def _f16(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The float16 at byte ``start`` of every block, as a float32 ``(n_blocks, 1)`` column."""
    raw = blocks[:, start : start + 2]
    try:
        half = raw.view(torch.float16)
    except RuntimeError:  # unaligned in memory: copy the two bytes per block first
        half = raw.contiguous().view(torch.float16)
    return half.float()


def _as_wide_ints(packed: torch.Tensor) -> torch.Tensor:
    """View ``(..., width)`` bytes as the widest signed ints their layout allows (fewer, larger elements)."""
    for dtype in (torch.int64, torch.int32, torch.int16):
        size = dtype.itemsize
        aligned = packed.storage_offset() % size == 0 and all(stride % size == 0 for stride in packed.stride()[:-1])
        if packed.shape[-1] % size == 0 and aligned:
            try:
                return packed.view(dtype)
            except RuntimeError:
                break
    return packed


def _bit_planes(packed: torch.Tensor, shifts: tuple[int, ...], mask: int) -> torch.Tensor:
    """``(..., width)`` bytes -> ``(..., len(shifts), width)`` bytes of ``(byte >> shift) & mask``.

    Works on whole machine words: shifting a word and masking every byte keeps each byte's own
    bits, since ``mask <= 0xFF >> shift`` drops whatever crossed in from the neighbouring byte.
    """
    wide = _as_wide_ints(packed)
    word_mask = int.from_bytes(bytes([mask]) * wide.element_size(), "little")
    out = torch.empty((*wide.shape[:-1], len(shifts), wide.shape[-1]), dtype=wide.dtype)
    for index, shift in enumerate(shifts):
        plane = out[..., index, :]
        torch.bitwise_right_shift(wide, shift, out=plane)
        plane.bitwise_and_(word_mask)
    return out.view(torch.uint8)


def _low_high_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """``(..., m)`` bytes -> ``(..., 2, m)``: low nibbles first, then high nibbles (ggml's order in a block)."""
    return _bit_planes(packed, (0, 4), 0x0F)


def _high_bits_32(qh: torch.Tensor) -> torch.Tensor:
    """Q5 blocks: 4 bytes (a little-endian uint32) -> bit j of it for j in 0..31, as ``(n, 32)`` uint8."""
    shift = torch.arange(8, dtype=torch.uint8).view(1, 1, 8)
    return torch.bitwise_and(torch.bitwise_right_shift(qh.unsqueeze(2), shift), 1).view(qh.shape[0], 32)


def _k_scales_mins(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K: 12 bytes -> eight 6-bit scales and eight 6-bit mins per super-block."""
    d, m, md = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = torch.cat(
        [torch.bitwise_and(d, 0x3F), torch.bitwise_and(md, 0x0F) | torch.bitwise_and(d >> 2, 0x30)], dim=1
    )
    mins = torch.cat([torch.bitwise_and(m, 0x3F), (md >> 4) | torch.bitwise_and(m >> 2, 0x30)], dim=1)
    return scales, mins


def dequant_q4_0(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    q = _low_high_nibbles(blocks[:, 2:18]).view(torch.int8).sub_(8).view(n, 32)
    torch.mul(d, q, out=out)


def dequant_q4_1(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    q = _low_high_nibbles(blocks[:, 4:20]).view(n, 32)
    torch.mul(d, q, out=out)
    out.add_(m)


def dequant_q5_0(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    high = _high_bits_32(blocks[:, 2:6])
    q = _low_high_nibbles(blocks[:, 6:22]).view(n, 32)
    q.bitwise_or_(high << 4)
    torch.mul(d, q.view(torch.int8).sub_(16), out=out)


def dequant_q5_1(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    high = _high_bits_32(blocks[:, 4:8])
    q = _low_high_nibbles(blocks[:, 8:24]).view(n, 32)
    q.bitwise_or_(high << 4)
    torch.mul(d, q, out=out)
    out.add_(m)


def dequant_q8_0(blocks: torch.Tensor, out: torch.Tensor) -> None:
    d = _f16(blocks, 0)
    torch.mul(blocks[:, 2:34].view(torch.int8), d, out=out)


def dequant_q2_k(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    scales, qs = blocks[:, 0:16], blocks[:, 16:80]
    d, dmin = _f16(blocks, 80), _f16(blocks, 82)
    dl = (d * torch.bitwise_and(scales, 0x0F)).view(n, 16, 1)
    ml = (dmin * (scales >> 4)).view(n, 16, 1)
    q = _bit_planes(qs.view(n, 2, 32), (0, 2, 4, 6), 3).view(n, 16, 16)
    torch.mul(dl, q, out=out.view(n, 16, 16))
    out.view(n, 16, 16).sub_(ml)


def dequant_q3_k(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    hmask, qs, packed = blocks[:, 0:32], blocks[:, 32:96], blocks[:, 96:108]
    d = _f16(blocks, 108)
    # 16 six-bit scales: low 4 bits from bytes 0..7 (low nibbles, then high nibbles), top 2 from bytes 8..11.
    low = _low_high_nibbles(packed[:, 0:8]).view(n, 16)
    high = _bit_planes(packed[:, 8:12].unsqueeze(1), (0, 2, 4, 6), 3).view(n, 16)
    scales = (low | (high << 4)).view(torch.int8).sub(32)
    dl = (d * scales).view(n, 16, 1)
    q = _bit_planes(qs.view(n, 2, 32), (0, 2, 4, 6), 3).view(n, 16, 16).view(torch.int8)
    # A set hmask bit means "no offset"; a clear one subtracts 4.
    hbit = _bit_planes(hmask.view(n, 1, 32), tuple(range(8)), 1).view(n, 16, 16)
    q = q - ((hbit ^ 1) << 2).view(torch.int8)
    torch.mul(dl, q, out=out.view(n, 16, 16))


def dequant_q4_k(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    scales, mins = _k_scales_mins(blocks[:, 4:16])
    dl = (d * scales).view(n, 8, 1)
    ml = (dmin * mins).view(n, 8, 1)
    q = _low_high_nibbles(blocks[:, 16:144].view(n, 4, 32)).view(n, 8, 32)
    torch.mul(dl, q, out=out.view(n, 8, 32))
    out.view(n, 8, 32).sub_(ml)


def dequant_q5_k(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    scales, mins = _k_scales_mins(blocks[:, 4:16])
    dl = (d * scales).view(n, 8, 1)
    ml = (dmin * mins).view(n, 8, 1)
    high = _bit_planes(blocks[:, 16:48].view(n, 1, 32), tuple(range(8)), 1).view(n, 8, 32)
    q = _low_high_nibbles(blocks[:, 48:176].view(n, 4, 32)).view(n, 8, 32)
    q.bitwise_or_(high << 4)
    torch.mul(dl, q, out=out.view(n, 8, 32))
    out.view(n, 8, 32).sub_(ml)


def dequant_q6_k(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    ql, qh, scales = blocks[:, 0:128], blocks[:, 128:192], blocks[:, 192:208]
    d = _f16(blocks, 208)
    dl = (d * scales.view(torch.int8)).view(n, 16, 1)
    low = _low_high_nibbles(ql.view(n, 2, 64)).view(n, 8, 32)
    high = _bit_planes(qh.view(n, 2, 32), (0, 2, 4, 6), 3).view(n, 8, 32)
    q = (low | (high << 4)).view(torch.int8).sub_(32).view(n, 16, 16)
    torch.mul(dl, q, out=out.view(n, 16, 16))


QUANTISED: dict[GGMLQuantizationType, Dequantiser] = {
    GGMLQuantizationType.Q4_0: dequant_q4_0,
    GGMLQuantizationType.Q4_1: dequant_q4_1,
    GGMLQuantizationType.Q5_0: dequant_q5_0,
    GGMLQuantizationType.Q5_1: dequant_q5_1,
    GGMLQuantizationType.Q8_0: dequant_q8_0,
    GGMLQuantizationType.Q2_K: dequant_q2_k,
    GGMLQuantizationType.Q3_K: dequant_q3_k,
    GGMLQuantizationType.Q4_K: dequant_q4_k,
    GGMLQuantizationType.Q5_K: dequant_q5_k,
    GGMLQuantizationType.Q6_K: dequant_q6_k,
    **IQ_TYPES,
}

# Plain (unquantised) storage types and the torch dtype their bytes hold.
PLAIN: dict[GGMLQuantizationType, torch.dtype] = {
    GGMLQuantizationType.F32: torch.float32,
    GGMLQuantizationType.F16: torch.float16,
    GGMLQuantizationType.BF16: torch.bfloat16,
}

SUPPORTED_TYPES: tuple[str, ...] = tuple(t.name for t in (*PLAIN, *QUANTISED))


def is_supported(ggml_type: int) -> bool:
    try:
        kind = GGMLQuantizationType(ggml_type)
    except ValueError:
        return False
    return kind in PLAIN or kind in QUANTISED


def _check_size(raw: torch.Tensor, kind: GGMLQuantizationType, shape: tuple[int, ...], name: str) -> None:
    block_size, type_size = GGML_QUANT_SIZES[kind]
    count = 1
    for dim in shape:
        count *= dim
    if any(dim < 0 for dim in shape) or (shape and shape[-1] % block_size):
        raise CheckpointError(
            f"GGUF {kind.name} {name} of shape {tuple(shape)}: rows must be a whole number of {block_size}-value "
            f"{kind.name} blocks; the file is corrupt or its tensor table was edited. Download it again."
        )
    expected = count // block_size * type_size
    if raw.dim() != 1 or raw.dtype != torch.uint8 or raw.numel() != expected:
        raise CheckpointError(
            f"GGUF {kind.name} {name} of shape {tuple(shape)} needs {expected} bytes ({count // block_size} blocks of "
            f"{type_size} bytes), but {raw.numel()} bytes were given: a truncated or partial block. "
            "The file is truncated or corrupt; download it again."
        )


# Values expanded per call of a dequantiser: ATen runs an element-wise op on the calling thread up to
# its grain size (32768 elements) and opens a parallel region above it. Hundreds of parallel regions
# per tensor each wait at a barrier for every intra-op thread, which on a busy machine (a descheduled
# thread) turned a 1 s load into 15 s; chunks this size never open one, and setting the process's
# thread count (which a running server shares) is not ours to do.
CHUNK_VALUES = 32768


def dequantize(
    raw: torch.Tensor,
    ggml_type: int,
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    name: str = "tensor",
) -> torch.Tensor:
    """Dequantise the raw bytes of one tensor (uint8, any length matching ``shape``) to ``dtype``.

    Plain types are copied (converting when the dtypes differ); quantised types are expanded
    :data:`CHUNK_VALUES` values at a time (all at once on one intra-op thread), vectorised over the chunk's blocks, straight into the
    result when ``dtype`` is float32. Bytes that do not hold ``shape`` in whole blocks (a truncated
    block, rows not a multiple of the block) raise :class:`CheckpointError` naming ``name``.
    """
    kind = GGMLQuantizationType(ggml_type)
    _check_size(raw, kind, shape, name)
    plain = PLAIN.get(kind)
    if plain is not None:
        values = raw.view(plain).view(shape)
        return values.to(dtype, copy=True) if values.dtype == dtype else values.to(dtype)
    dequantiser = QUANTISED.get(kind)
    if dequantiser is None:
        raise NotImplementedError(kind.name)
    block_size, type_size = GGML_QUANT_SIZES[kind]
    blocks = raw.view(-1, type_size)
    out = torch.empty(shape, dtype=torch.float32)
    values = out.view(-1, block_size)
    # on one intra-op thread there is no region to avoid, and one call per tensor costs less Python
    step = blocks.shape[0] if torch.get_num_threads() == 1 else max(1, CHUNK_VALUES // block_size)
    for first in range(0, blocks.shape[0], step):
        dequantiser(blocks[first : first + step], values[first : first + step])
    return out if dtype == torch.float32 else out.to(dtype)

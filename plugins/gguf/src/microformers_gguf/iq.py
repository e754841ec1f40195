"""Dequantising ggml's IQ ("importance") block types with torch, all blocks of a chunk at once.

Same contract as :mod:`microformers_gguf.dequant`: each function takes ``(n_blocks, type_size)``
uint8 and writes ``(n_blocks, block_size)`` float32 into ``out``, with the float operations in the
order of ggml's reference dequantisers (bit-identical to ``gguf.quants.dequantize``).

The IQ2/IQ3/IQ1 types index lattice "grids" (8 or 4 values per entry, chosen by a search when the
format was designed, so they cannot be derived); those tables, and IQ4's 16-value non-linear
codebook, are the format's published data, read here from the installed ``gguf`` package
(``grid_hex``: the entries' value indices, packed LSB first, as hex text). Sign patterns are
derived: IQ2/IQ3 store 7 sign bits per 8 values and the 8th makes the count of minus signs even.

Layouts (``QK_K`` = 256 values per super-block, 32-value sub-blocks ``ib``):

- IQ2_XXS (66 B): f16 d | 8 x (4 grid bytes, uint32: 4 x 7 sign bits + 4-bit scale s); ``d (0.5 + s) / 4``
- IQ2_XS (74 B): f16 d | 32 x uint16 (9-bit grid index, 7 sign bits) | 8 bytes of 4-bit scales (per 16 values)
- IQ2_S (82 B): f16 d | 32 grid low bytes | 32 sign bytes | 8 bytes of 2-bit index highs | 8 scale bytes
- IQ3_XXS (98 B): f16 d | 64 grid bytes (4 values each) | 8 x uint32 (4 x 7 sign bits + s); ``d (0.5 + s) / 2``
- IQ3_S (110 B): f16 d | 64 grid low bytes | 8 bytes of index high bits | 32 sign bytes | 4 scale bytes; ``d (1 + 2 s)``
- IQ1_S (50 B): f16 d | 32 grid low bytes | 8 x uint16 (4 x 3 index bits, 3-bit scale, delta sign)
- IQ1_M (56 B): 32 grid low bytes | 16 bytes (per 8 values: 3 index bits + delta sign) | 4 x uint16 of
  3-bit scales whose top nibbles together are the f16 d
- IQ4_NL (18 B, 32 values): f16 d | 16 bytes of 4-bit codebook indices (low nibbles, then high)
- IQ4_XS (136 B): f16 d | uint16 of 2-bit scale highs | 4 bytes of 4-bit scale lows | 128 index bytes
"""

from __future__ import annotations

import functools

import torch
from gguf.constants import GGMLQuantizationType

Q = GGMLQuantizationType

# IQ1's grid values are -1, 0, 1, shifted by +-1/8 per 8 values (the sign a stored bit chooses).
IQ1_DELTA = 0.125


def _u16(blocks: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """``count`` little-endian uint16 from byte ``start`` of every block, as int32 ``(n, count)``."""
    pairs = blocks[:, start : start + 2 * count].view(blocks.shape[0], count, 2).to(torch.int32)
    return pairs[..., 0] | (pairs[..., 1] << 8)


def _u32(blocks: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """``count`` little-endian uint32 from byte ``start`` of every block, as int64 ``(n, count)``."""
    quads = blocks[:, start : start + 4 * count].view(blocks.shape[0], count, 4).to(torch.int64)
    return quads[..., 0] | (quads[..., 1] << 8) | (quads[..., 2] << 16) | (quads[..., 3] << 24)


def _f16(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The float16 at byte ``start`` of every block, as float32 ``(n, 1)``."""
    return blocks[:, start : start + 2].contiguous().view(torch.float16).float()


def _fields(values: torch.Tensor, shifts: list[int], mask: int) -> torch.Tensor:
    """``(n, m)`` ints -> ``(n, m * len(shifts))``: ``(value >> shift) & mask`` for each shift, value-major."""
    shift = torch.tensor(shifts, dtype=values.dtype)
    return ((values.unsqueeze(-1) >> shift) & mask).flatten(1)


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """``(n, m)`` bytes -> ``(n, 2 m)`` int64: each byte's low nibble, then its high nibble."""
    return _fields(packed.to(torch.int64), [0, 4], 0x0F)


@functools.cache
def _grid(kind: GGMLQuantizationType) -> torch.Tensor:
    """The lattice grid of an IQ type as float32 ``(entries, values per entry)``."""
    import gguf.quants

    table = getattr(gguf.quants, kind.name)
    if kind == Q.IQ1_M:  # IQ1_M indexes IQ1_S's grid
        table = gguf.quants.IQ1_S
    levels = torch.tensor(table.grid_map, dtype=torch.float32)
    bits = max(1, (len(levels) - 1).bit_length())
    per_byte = 8 // bits
    packed = torch.frombuffer(bytearray.fromhex(table.grid_hex.decode("ascii")), dtype=torch.uint8)
    index = _fields(packed.view(1, -1).to(torch.int64), list(range(0, 8, 8 // per_byte)), (1 << bits) - 1)
    return levels[index.view(-1)].view(table.grid_shape)


@functools.cache
def _byte_signs() -> torch.Tensor:
    """``(256, 8)`` float32: for a sign byte, -1 where bit j is set, else 1."""
    bits = (torch.arange(256).unsqueeze(1) >> torch.arange(8)) & 1
    return 1.0 - 2.0 * bits.float()


@functools.cache
def _seven_bit_signs() -> torch.Tensor:
    """``(128, 8)`` float32: 7 stored sign bits, the 8th set when needed for an even count of minus signs."""
    low = torch.arange(128)
    parity = ((low.unsqueeze(1) >> torch.arange(7)) & 1).sum(1) & 1
    return _byte_signs()[low | (parity << 7)]


@functools.cache
def _iq4_codebook() -> torch.Tensor:
    import gguf.quants

    return torch.tensor(gguf.quants.IQ4_NL.kvalues, dtype=torch.float32)


def dequant_iq2_xxs(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    aux = _u32(blocks, 2, 16).view(n, 8, 2)[..., 1]  # per sub-block: 4 x 7 sign bits, then the scale
    db = (d * ((aux >> 28).float() + 0.5) * 0.25).view(n, 8, 1, 1)
    signs = _seven_bit_signs()[_fields(aux, [0, 7, 14, 21], 0x7F)].view(n, 8, 4, 8)
    index = blocks[:, 2:66].view(n, 8, 8)[:, :, 0:4].to(torch.int64)
    grid = _grid(Q.IQ2_XXS)[index]
    torch.mul(db * grid, signs, out=out.view(n, 8, 4, 8))


def dequant_iq2_xs(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    qs = _u16(blocks, 2, 32).to(torch.int64)
    scales = _nibbles(blocks[:, 66:74]).float()
    db = (d * (scales + 0.5) * 0.25).view(n, 16, 1, 1)
    signs = _seven_bit_signs()[qs >> 9].view(n, 16, 2, 8)
    grid = _grid(Q.IQ2_XS)[qs & 511].view(n, 16, 2, 8)
    torch.mul(db * grid, signs, out=out.view(n, 16, 2, 8))


def dequant_iq2_s(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    high = _fields(blocks[:, 66:74].to(torch.int64), [0, 2, 4, 6], 3)
    index = blocks[:, 2:34].to(torch.int64) | (high << 8)
    signs = _byte_signs()[blocks[:, 34:66].to(torch.int64)].view(n, 16, 2, 8)
    scales = _nibbles(blocks[:, 74:82]).float()
    db = (d * (scales + 0.5) * 0.25).view(n, 16, 1, 1)
    grid = _grid(Q.IQ2_S)[index].view(n, 16, 2, 8)
    torch.mul(db * grid, signs, out=out.view(n, 16, 2, 8))


def dequant_iq3_xxs(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    aux = _u32(blocks, 66, 8)
    db = (d * ((aux >> 28).float() + 0.5) * 0.5).view(n, 8, 1, 1)
    signs = _seven_bit_signs()[_fields(aux, [0, 7, 14, 21], 0x7F)].view(n, 8, 4, 8)
    grid = _grid(Q.IQ3_XXS)[blocks[:, 2:66].to(torch.int64)].view(n, 8, 4, 8)
    torch.mul(db * grid, signs, out=out.view(n, 8, 4, 8))


def dequant_iq3_s(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    high = _fields(blocks[:, 66:74].to(torch.int64), list(range(8)), 1)
    index = blocks[:, 2:66].to(torch.int64) | (high << 8)
    signs = _byte_signs()[blocks[:, 74:106].to(torch.int64)].view(n, 8, 4, 8)
    scales = _nibbles(blocks[:, 106:110])
    db = (d * (2 * scales + 1).float()).view(n, 8, 1, 1)
    grid = _grid(Q.IQ3_S)[index].view(n, 8, 4, 8)
    torch.mul(db * grid, signs, out=out.view(n, 8, 4, 8))


def dequant_iq1_s(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    qh = _u16(blocks, 34, 8).to(torch.int64)
    dl = (d * (2 * ((qh >> 12) & 7) + 1).float()).view(n, 8, 1, 1)
    delta = torch.where((qh & 0x8000) != 0, -IQ1_DELTA, IQ1_DELTA).view(n, 8, 1, 1)
    index = blocks[:, 2:34].to(torch.int64) | (_fields(qh, [0, 3, 6, 9], 7) << 8)
    grid = _grid(Q.IQ1_S)[index].view(n, 8, 4, 8)
    torch.mul(dl, grid + delta, out=out.view(n, 8, 4, 8))


def dequant_iq1_m(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    packed = _u16(blocks, 48, 4)
    # d's 16 bits are the top nibbles of the four scale words, first word lowest
    top = packed >> 12
    d_bits = top[:, 0] | (top[:, 1] << 4) | (top[:, 2] << 8) | (top[:, 3] << 12)
    d_bytes = torch.stack([d_bits & 0xFF, d_bits >> 8], dim=1).to(torch.uint8)
    d = d_bytes.view(torch.float16).float()  # (n, 1)
    scales = _fields(packed, [0, 3, 6, 9], 7)  # per 16 values
    dl = (d * (2 * scales + 1).float()).view(n, 16, 1, 1)
    qh = _nibbles(blocks[:, 32:48])  # per 8 values: 3 index bits, then the delta sign
    delta = torch.where((qh & 8) != 0, -IQ1_DELTA, IQ1_DELTA).view(n, 16, 2, 1)
    index = blocks[:, 0:32].to(torch.int64) | ((qh & 7) << 8)
    grid = _grid(Q.IQ1_M)[index].view(n, 16, 2, 8)
    torch.mul(dl, grid + delta, out=out.view(n, 16, 2, 8))


def dequant_iq4_nl(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    low_high = blocks[:, 2:18].to(torch.int64)
    index = torch.cat([low_high & 0x0F, low_high >> 4], dim=1)
    torch.mul(d, _iq4_codebook()[index], out=out.view(n, 32))


def dequant_iq4_xs(blocks: torch.Tensor, out: torch.Tensor) -> None:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    high = _fields(_u16(blocks, 2, 1).to(torch.int64), list(range(0, 16, 2)), 3)
    scales = (_nibbles(blocks[:, 4:8]) | (high << 4)) - 32
    dl = (d * scales.float()).view(n, 8, 1)
    q = blocks[:, 8:136].view(n, 8, 16).to(torch.int64)
    index = torch.cat([q & 0x0F, q >> 4], dim=2)
    torch.mul(dl, _iq4_codebook()[index], out=out.view(n, 8, 32))


IQ_TYPES = {
    Q.IQ1_S: dequant_iq1_s,
    Q.IQ1_M: dequant_iq1_m,
    Q.IQ2_XXS: dequant_iq2_xxs,
    Q.IQ2_XS: dequant_iq2_xs,
    Q.IQ2_S: dequant_iq2_s,
    Q.IQ3_XXS: dequant_iq3_xxs,
    Q.IQ3_S: dequant_iq3_s,
    Q.IQ4_NL: dequant_iq4_nl,
    Q.IQ4_XS: dequant_iq4_xs,
}

"""Dequantisation matches the gguf package's reference dequantiser bit for bit."""

from __future__ import annotations

import gguf.quants
import numpy as np
import pytest
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from microformers_gguf.dequant import SUPPORTED_TYPES, dequantize, is_supported

Q = GGMLQuantizationType

# Types gguf.quants can quantise: the test quantises real-valued data with it.
QUANTISABLE = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]
# K-quants: gguf.quants only dequantises them, so the test builds random but valid blocks.
K_QUANTS = [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
# Byte offsets of each block's float16 scale fields (everything else is free-form bits).
F16_FIELDS = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


def random_blocks(kind: GGMLQuantizationType, rows: int, blocks_per_row: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    _, type_size = GGML_QUANT_SIZES[kind]
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, type_size), dtype=np.uint8)
    for start in F16_FIELDS[kind]:
        raw[:, start : start + 2] = rng.normal(scale=0.05, size=(raw.shape[0], 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, blocks_per_row * type_size)


def ours(raw: np.ndarray, kind: GGMLQuantizationType, shape: tuple[int, ...], **kw: object) -> torch.Tensor:
    return dequantize(torch.from_numpy(raw.reshape(-1).copy()), int(kind), shape, **kw)


def test_every_listed_type_is_supported() -> None:
    listed = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
    iq = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS"}
    assert listed | iq == set(SUPPORTED_TYPES)
    assert not is_supported(int(Q.TQ1_0))
    assert not is_supported(9999)


@pytest.mark.parametrize("kind", QUANTISABLE, ids=lambda k: k.name)
def test_quantised_types_match_reference(kind: GGMLQuantizationType) -> None:
    rng = np.random.default_rng(int(kind))
    data = rng.normal(size=(37, 256)).astype(np.float32)
    data[3] = 0.0  # an all-zero row: zero scale
    raw = gguf.quants.quantize(data, kind)
    expected = gguf.quants.dequantize(raw, kind)
    result = ours(raw, kind, data.shape)
    assert result.dtype == torch.float32 and tuple(result.shape) == data.shape
    # exact: the reference's elementwise float32 formula, each operation correctly rounded on any CPU
    assert np.array_equal(result.numpy(), expected)
    assert np.abs(result.numpy() - data).max() < 0.5  # and it really is the data


@pytest.mark.parametrize("kind", K_QUANTS, ids=lambda k: k.name)
def test_k_quants_match_reference(kind: GGMLQuantizationType) -> None:
    block_size, _ = GGML_QUANT_SIZES[kind]
    raw = random_blocks(kind, rows=21, blocks_per_row=3, seed=int(kind))
    expected = gguf.quants.dequantize(raw, kind)
    result = ours(raw, kind, (21, 3 * block_size))
    assert np.isfinite(expected).all()
    # exact: the reference's elementwise float32 formula, each operation correctly rounded on any CPU
    assert np.array_equal(result.numpy(), expected)


@pytest.mark.parametrize("kind", [Q.F32, Q.F16, Q.BF16], ids=lambda k: k.name)
def test_plain_types_match_reference(kind: GGMLQuantizationType) -> None:
    data = np.random.default_rng(1).normal(size=(5, 64)).astype(np.float32)
    stored = gguf.quants.quantize(data, kind)  # float32, float16, or BF16 bytes
    expected = gguf.quants.dequantize(stored, kind)
    result = ours(stored.view(np.uint8), kind, data.shape)
    # exact: the reference's elementwise float32 formula, each operation correctly rounded on any CPU
    assert np.array_equal(result.numpy(), expected.reshape(data.shape))
    if kind == Q.F32:
        # exact: F32 bytes are copied, not computed
        assert np.array_equal(result.numpy(), data)


@pytest.mark.parametrize("kind", [*QUANTISABLE, *K_QUANTS], ids=lambda k: k.name)
@pytest.mark.parametrize("offset", [2, 4, 6])
def test_any_placement_in_memory(kind: GGMLQuantizationType, offset: int) -> None:
    """A tensor's bytes need not be 8-byte aligned (the word-wise paths fall back)."""
    block_size, type_size = GGML_QUANT_SIZES[kind]
    raw = (
        gguf.quants.quantize(np.random.default_rng(2).normal(size=(4, 256)).astype(np.float32), kind)
        if kind in QUANTISABLE
        else random_blocks(kind, rows=4, blocks_per_row=1, seed=3)
    )
    buffer = torch.zeros(offset + raw.size, dtype=torch.uint8)
    buffer[offset:] = torch.from_numpy(raw.reshape(-1).copy())
    shape = (4, raw.shape[1] // type_size * block_size)
    result = dequantize(buffer[offset:], int(kind), shape)
    # exact: the reference's elementwise float32 formula, each operation correctly rounded on any CPU
    assert np.array_equal(result.numpy(), gguf.quants.dequantize(raw, kind))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("kind", [Q.Q4_K, Q.Q8_0, Q.F16], ids=lambda k: k.name)
def test_other_output_dtypes_round_the_float32_result(kind: GGMLQuantizationType, dtype: torch.dtype) -> None:
    if kind == Q.Q4_K:
        raw = random_blocks(kind, rows=2, blocks_per_row=1, seed=4)
    else:
        raw = gguf.quants.quantize(np.random.default_rng(5).normal(size=(2, 256)).astype(np.float32), kind)
        raw = raw.view(np.uint8)
    shape = (2, 256)
    result = ours(raw, kind, shape, dtype=dtype)
    assert result.dtype == dtype
    # exact: the same float32 result rounded once to dtype, both ways
    assert torch.equal(result, ours(raw, kind, shape).to(dtype))


def test_unsupported_type_raises() -> None:
    with pytest.raises(NotImplementedError, match="TQ1_0"):
        dequantize(torch.zeros(54, dtype=torch.uint8), int(Q.TQ1_0), (256,))

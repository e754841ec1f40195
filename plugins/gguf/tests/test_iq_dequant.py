"""IQ block types (IQ1_S ... IQ4_XS) dequantise bit for bit like the gguf package's reference, in files too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import gguf.quants
import numpy as np
import pytest
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from microformers.errors import CheckpointError
from microformers_gguf.dequant import dequantize, is_supported
from microformers_gguf.format import GGUF_FORMAT
from microformers_gguf.iq import IQ_TYPES, _seven_bit_signs
from microformers_gguf.reader import read_gguf

Q = GGMLQuantizationType

IQ = [Q.IQ1_S, Q.IQ1_M, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ4_NL, Q.IQ4_XS]


def random_iq_blocks(kind: GGMLQuantizationType, n_blocks: int, seed: int) -> np.ndarray:
    """Random but valid blocks: every bit free-form except the float16 super-block scale, set to a sane value."""
    rng = np.random.default_rng(seed)
    _, type_size = GGML_QUANT_SIZES[kind]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    d = rng.normal(scale=0.05, size=n_blocks).astype(np.float16).view(np.uint16)
    if kind == Q.IQ1_M:
        # d's four nibbles are the top nibbles of the four uint16 scale words at bytes 48..56
        words = raw[:, 48:56].copy().view(np.uint16)
        for i in range(4):
            words[:, i] = (words[:, i] & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12)
        raw[:, 48:56] = words.view(np.uint8)
    else:
        raw[:, 0:2] = d.reshape(-1, 1).view(np.uint8)
    return raw


def ours(raw: np.ndarray, kind: GGMLQuantizationType, shape: tuple[int, ...]) -> np.ndarray:
    return dequantize(torch.from_numpy(raw.reshape(-1).copy()), int(kind), shape).numpy()


def test_every_iq_type_is_supported() -> None:
    assert set(IQ_TYPES) == set(IQ)
    assert all(is_supported(int(kind)) for kind in IQ)


@pytest.mark.parametrize("kind", IQ, ids=lambda k: k.name)
def test_iq_types_match_reference(kind: GGMLQuantizationType) -> None:
    block_size, type_size = GGML_QUANT_SIZES[kind]
    rows, per_row = 7, 3
    raw = random_iq_blocks(kind, rows * per_row, seed=int(kind)).reshape(rows, per_row * type_size)
    expected = gguf.quants.dequantize(raw, kind)
    result = ours(raw, kind, (rows, per_row * block_size))
    assert expected.shape == result.shape == (rows, per_row * block_size)
    assert np.isfinite(expected).all() and np.count_nonzero(expected) > expected.size // 2
    # exact: the reference's elementwise float32 formula, each operation correctly rounded on any CPU
    assert np.array_equal(result, expected)


@pytest.mark.parametrize("kind", IQ, ids=lambda k: k.name)
def test_iq_blocks_at_any_byte_offset(kind: GGMLQuantizationType) -> None:
    """IQ blocks (66, 74, 98 ... bytes) sit at any alignment in a file; the multi-byte fields are read bytewise."""
    block_size, _ = GGML_QUANT_SIZES[kind]
    raw = random_iq_blocks(kind, 4, seed=7 + int(kind))
    for offset in (1, 2, 3):
        buffer = torch.zeros(offset + raw.size, dtype=torch.uint8)
        buffer[offset:] = torch.from_numpy(raw.reshape(-1))
        result = dequantize(buffer[offset:], int(kind), (4, block_size))
        # exact: the same bytes through the same float32 operations
        assert np.array_equal(result.numpy(), gguf.quants.dequantize(raw, kind).reshape(4, block_size))


def test_every_sign_pattern_has_an_even_count_of_minus_signs() -> None:
    """The 8th sign of IQ2/IQ3 groups is implied; the derived table equals the format's published one."""
    table = _seven_bit_signs()
    assert bool(((table < 0).sum(1) % 2 == 0).all())
    published = np.frombuffer(gguf.quants.IQ2_XXS.ksigns, dtype=np.uint8)
    bits = (published[:, None] >> np.arange(8)) & 1
    # exact: +-1 values
    assert np.array_equal(table.numpy(), 1.0 - 2.0 * bits)


@pytest.mark.parametrize("kind", [Q.IQ2_XXS, Q.IQ4_NL, Q.IQ1_M], ids=lambda k: k.name)
def test_truncated_block_is_refused_with_the_tensor_name(kind: GGMLQuantizationType) -> None:
    block_size, _ = GGML_QUANT_SIZES[kind]
    raw = torch.from_numpy(random_iq_blocks(kind, 2, seed=1).reshape(-1))
    with pytest.raises(CheckpointError, match=rf"{kind.name} blk\.0\.ffn_up\.weight .*truncated"):
        dequantize(raw[:-5], int(kind), (2, block_size), name="blk.0.ffn_up.weight")
    with pytest.raises(CheckpointError, match=rf"whole number of {block_size}-value {kind.name} blocks"):
        dequantize(raw, int(kind), (1, 2 * block_size - 16), name="blk.0.ffn_up.weight")
    with pytest.raises(CheckpointError, match="needs .* bytes"):
        dequantize(raw, int(kind), (3, block_size))  # more blocks than bytes: never reads past the buffer


def test_gguf_file_with_every_iq_type_reads_like_the_gguf_reader(tmp_path: Path) -> None:
    """Tensors of every IQ type in one file (odd block sizes between them) come back as gguf's own reader has them."""
    path = tmp_path / "iq.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    blocks = {}
    for index, kind in enumerate(IQ):
        _, type_size = GGML_QUANT_SIZES[kind]
        blocks[kind] = random_iq_blocks(kind, 6, seed=100 + index).reshape(2, 3 * type_size)
        writer.add_tensor(f"t.{kind.name}", blocks[kind], raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    parsed = read_gguf(path)
    reference = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    for kind in IQ:
        name = f"t.{kind.name}"
        info = parsed.tensors[name]
        assert info.type_name == kind.name and info.shape == (2, 3 * GGML_QUANT_SIZES[kind][0])
        result = dequantize(parsed.tensor_bytes(info), info.type_id, info.shape, name=name)
        expected = gguf.quants.dequantize(reference[name].data, kind)
        # exact: the same bytes through the same float32 operations
        assert np.array_equal(result.numpy(), expected.reshape(info.shape)), name


IQ4_NL_WEIGHTS = [
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.mlp.up_proj.weight",
    "model.layers.1.self_attn.k_proj.weight",
    "model.layers.1.mlp.down_proj.weight",
]


def test_iq4_nl_model_matches_reference(
    tmp_path: Path, gguf_writer: Callable[..., Path], tiny_weights: Callable[..., dict]
) -> None:
    """A tiny llama file with IQ4_NL weights (32-value blocks fit its rows) gives the reference's logits."""
    transformers = pytest.importorskip("transformers")
    import microformers

    weights = tiny_weights(5)
    raw = {}
    for index, name in enumerate(IQ4_NL_WEIGHTS):
        rows, cols = weights.pop(name).shape
        blocks = random_iq_blocks(Q.IQ4_NL, rows * cols // 32, seed=200 + index)
        blocks[:, 0:2] = np.full((blocks.shape[0], 1), 0.01, dtype=np.float16).view(np.uint8)  # values of order 1
        raw[name] = (blocks.reshape(rows, -1), Q.IQ4_NL)
    path = gguf_writer(tmp_path / "iq4_nl.gguf", weights=weights, raw=raw)

    state = GGUF_FORMAT.load([path])
    reference_model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=path.name, dtype=torch.float32
    )
    reference = reference_model.state_dict()
    for name in IQ4_NL_WEIGHTS:
        torch.testing.assert_close(state[name], reference[name], rtol=0, atol=1e-6, msg=name)
    model = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    ids = torch.tensor([[5, 17, 200, 3, 99, 42]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference_model(ids).logits, rtol=1e-4, atol=1e-4)

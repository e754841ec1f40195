"""Malformed or unsupported GGUF files raise microformers errors that name the file and the problem."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.constants import GGMLQuantizationType

from microformers.errors import (
    CheckpointError,
    ConfigError,
    FileMissingError,
    MicroformersError,
    UnknownModelTypeError,
)
from microformers_gguf.format import GGUF_FORMAT
from microformers_gguf.reader import read_gguf


@pytest.fixture
def valid_file(tmp_path: Path, gguf_writer: Callable[..., Path], tiny_weights: Callable[..., dict]) -> Path:
    qtypes = {"model.layers.0.mlp.up_proj.weight": GGMLQuantizationType.Q8_0}
    return gguf_writer(tmp_path / "model.gguf", weights=tiny_weights(), qtypes=qtypes)


def rewrite(path: Path, data: bytes, name: str = "bad.gguf") -> Path:
    out = path.with_name(name)
    out.write_bytes(data)
    return out


def load_everything(path: Path) -> None:
    files = [path]
    GGUF_FORMAT.load_config(files)
    GGUF_FORMAT.load(files)
    GGUF_FORMAT.load_tokenizer_files(files)


def test_the_valid_file_loads(valid_file: Path) -> None:
    load_everything(valid_file)


def test_wrong_magic(valid_file: Path) -> None:
    bad = rewrite(valid_file, b"GGML" + valid_file.read_bytes()[4:])
    with pytest.raises(CheckpointError, match=r"not a GGUF file.*'GGML'") as info:
        GGUF_FORMAT.load_config([bad])
    assert str(bad) in str(info.value)


@pytest.mark.parametrize("size", [0, 3, 23])
def test_too_small(valid_file: Path, size: int) -> None:
    bad = rewrite(valid_file, valid_file.read_bytes()[:size])
    with pytest.raises(CheckpointError, match="too small") as info:
        read_gguf(bad)
    assert str(bad) in str(info.value)


def test_truncated_anywhere(valid_file: Path) -> None:
    """Every cut, in the header, the metadata, the tensor table or the data, is reported as truncation."""
    data = valid_file.read_bytes()
    cuts = sorted({*range(24, 4000, 37), len(data) - 1, len(data) - 100, len(data) // 2})
    for cut in cuts:
        bad = rewrite(valid_file, data[:cut], f"cut{cut}.gguf")
        with pytest.raises(CheckpointError, match="truncated") as info:
            read_gguf(bad)
        assert str(bad) in str(info.value)


def test_unsupported_version(valid_file: Path) -> None:
    data = bytearray(valid_file.read_bytes())
    data[4:8] = struct.pack("<I", 7)
    with pytest.raises(CheckpointError, match="version 7"):
        read_gguf(rewrite(valid_file, bytes(data)))


def test_big_endian_file(valid_file: Path) -> None:
    data = bytearray(valid_file.read_bytes())
    data[4:8] = struct.pack(">I", 3)
    with pytest.raises(CheckpointError, match="big-endian"):
        read_gguf(rewrite(valid_file, bytes(data)))


@pytest.mark.parametrize("field", [8, 16], ids=["tensor_count", "kv_count"])
def test_absurd_counts_fail_fast(valid_file: Path, field: int) -> None:
    data = bytearray(valid_file.read_bytes())
    data[field : field + 8] = struct.pack("<Q", 2**62)
    with pytest.raises(CheckpointError, match="truncated"):
        read_gguf(rewrite(valid_file, bytes(data)))


def test_absurd_string_length(valid_file: Path) -> None:
    data = bytearray(valid_file.read_bytes())
    data[24:32] = struct.pack("<Q", 2**60)  # length of the first metadata key
    with pytest.raises(CheckpointError, match="truncated"):
        read_gguf(rewrite(valid_file, bytes(data)))


def tensor_entry_offset(data: bytes, name: str) -> int:
    """Byte offset just after a tensor's name in the tensor table (the table follows the metadata)."""
    encoded = name.encode()
    position = data.rfind(struct.pack("<Q", len(encoded)) + encoded)
    assert position > 0
    return position + 8 + len(encoded)


def test_unknown_type_id(valid_file: Path) -> None:
    data = bytearray(valid_file.read_bytes())
    at = tensor_entry_offset(data, "blk.0.ffn_up.weight")
    n_dims = struct.unpack_from("<I", data, at)[0]
    type_at = at + 4 + 8 * n_dims
    data[type_at : type_at + 4] = struct.pack("<I", 250)
    with pytest.raises(CheckpointError, match=r"blk\.0\.ffn_up\.weight.*type id 250"):
        read_gguf(rewrite(valid_file, bytes(data)))


def test_tensor_data_past_the_end(valid_file: Path) -> None:
    data = bytearray(valid_file.read_bytes())
    at = tensor_entry_offset(data, "output_norm.weight")
    n_dims = struct.unpack_from("<I", data, at)[0]
    offset_at = at + 4 + 8 * n_dims + 4
    data[offset_at : offset_at + 8] = struct.pack("<Q", len(data) * 4 // 32 * 32)
    with pytest.raises(CheckpointError, match=r"truncated: tensor 'output_norm\.weight'"):
        read_gguf(rewrite(valid_file, bytes(data)))


def test_too_many_dimensions(valid_file: Path) -> None:
    data = bytearray(valid_file.read_bytes())
    at = tensor_entry_offset(data, "output_norm.weight")
    data[at : at + 4] = struct.pack("<I", 9)
    with pytest.raises(CheckpointError, match="9 dimensions"):
        read_gguf(rewrite(valid_file, bytes(data)))


@pytest.mark.filterwarnings("ignore:GGUF file")
def test_header_bit_flips_never_escape_as_other_errors(valid_file: Path) -> None:
    """Corrupt header bytes: the file either still loads or fails with a microformers error, never a crash."""
    data = valid_file.read_bytes()
    header_end = read_gguf(valid_file).data_offset
    rng = np.random.default_rng(0)
    outcomes = {"loaded": 0, "refused": 0}
    for trial in range(150):
        corrupt = bytearray(data)
        for position in rng.integers(4, header_end, size=3):
            corrupt[position] ^= 1 << int(rng.integers(0, 8))
        bad = rewrite(valid_file, bytes(corrupt), f"flip{trial}.gguf")
        try:
            load_everything(bad)
            outcomes["loaded"] += 1
        except MicroformersError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0


def test_unsupported_quantisation_type(tmp_path: Path) -> None:
    path = tmp_path / "iq.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 1)
    writer.add_uint32("llama.embedding_length", 256)
    writer.add_uint32("llama.feed_forward_length", 256)
    writer.add_uint32("llama.attention.head_count", 2)
    writer.add_uint32("llama.vocab_size", 10)
    block_size, type_size = gguf.GGML_QUANT_SIZES[GGMLQuantizationType.TQ1_0]
    raw = np.zeros((256, 256 // block_size * type_size), dtype=np.uint8)
    writer.add_tensor("blk.0.ffn_up.weight", raw, raw_dtype=GGMLQuantizationType.TQ1_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert GGUF_FORMAT.load_config([path])["hidden_size"] == 256  # the header itself is fine
    with pytest.raises(CheckpointError, match=r"'blk\.0\.ffn_up\.weight' \(TQ1_0\).*Supported types: F32") as info:
        GGUF_FORMAT.load([path])
    assert str(path) in str(info.value)


@pytest.mark.parametrize("arch", ["bert", "mamba"])
def test_architecture_without_mapping(tmp_path: Path, gguf_writer: Callable[..., Path], arch: str) -> None:
    path = gguf_writer(tmp_path / f"{arch}.gguf", arch=arch, weights={}, permute=False)
    for call in (GGUF_FORMAT.load_config, GGUF_FORMAT.load):
        with pytest.raises(
            UnknownModelTypeError, match=rf"'{arch}' model.*supported: .*gpt2, llama, mistral, .*qwen2, .*qwen3"
        ) as info:
            call([path])
        assert str(path) in str(info.value)
    # The tokenizer does not depend on the architecture.
    assert "tokenizer.json" in GGUF_FORMAT.load_tokenizer_files([path])


def test_missing_config_key(tmp_path: Path) -> None:
    path = tmp_path / "nohidden.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ConfigError, match=r"lacks the metadata key 'llama\.embedding_length'"):
        GGUF_FORMAT.load_config([path])


def test_wrongly_typed_config_value(tmp_path: Path, gguf_writer: Callable[..., Path]) -> None:
    path = gguf_writer(tmp_path / "m.gguf", weights={}, metadata={"llama.vocab_size": "many"})
    with pytest.raises(ConfigError, match=r"'llama\.vocab_size' is 'many', not an integer"):
        GGUF_FORMAT.load_config([path])


def test_no_vocabulary(tmp_path: Path, gguf_writer: Callable[..., Path]) -> None:
    path = gguf_writer(tmp_path / "notok.gguf", weights={}, tokenizer=None)
    with pytest.raises(CheckpointError, match=r"no tokenizer vocabulary") as info:
        GGUF_FORMAT.load_tokenizer_files([path])
    assert str(path) in str(info.value)


def test_unsupported_tokenizer_model(tmp_path: Path, gguf_writer: Callable[..., Path]) -> None:
    path = gguf_writer(tmp_path / "bert.gguf", weights={}, tokenizer=None, metadata={"tokenizer.ggml.model": "bert"})
    with pytest.raises(CheckpointError, match=r"tokenizer model 'bert'"):
        GGUF_FORMAT.load_tokenizer_files([path])


def test_find(tmp_path: Path, valid_file: Path) -> None:
    assert GGUF_FORMAT.find(tmp_path) is None  # not a GGUF load
    assert GGUF_FORMAT.find(tmp_path, gguf_file=valid_file.name) == [valid_file]
    assert GGUF_FORMAT.find(tmp_path / "elsewhere", gguf_file=str(valid_file)) == [valid_file]
    with pytest.raises(FileMissingError, match=r"gguf_file 'nope\.gguf' was not found") as info:
        GGUF_FORMAT.find(tmp_path, gguf_file="nope.gguf")
    assert str(tmp_path / "nope.gguf") in str(info.value)


def test_directory_and_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="is a directory"):
        read_gguf(tmp_path)
    with pytest.raises(FileMissingError, match="does not exist"):
        GGUF_FORMAT.load_config([tmp_path / "absent.gguf"])


def test_several_files_are_refused(valid_file: Path) -> None:
    with pytest.raises(CheckpointError, match="one file"):
        GGUF_FORMAT.load_config([valid_file, valid_file])


def test_bad_dtype(valid_file: Path) -> None:
    with pytest.raises(CheckpointError, match="not a floating-point torch dtype"):
        GGUF_FORMAT.load([valid_file], dtype="int8")


@pytest.mark.parametrize("architecture", ["llama", "phi3"])
def test_a_zero_head_count_is_a_clear_error_not_a_division_by_zero(tmp_path: Path, architecture: str) -> None:
    path = tmp_path / "zero-heads.gguf"
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_uint32(f"{architecture}.block_count", 1)
    writer.add_uint32(f"{architecture}.context_length", 64)
    writer.add_uint32(f"{architecture}.embedding_length", 32)
    writer.add_uint32(f"{architecture}.feed_forward_length", 64)
    writer.add_uint32(f"{architecture}.attention.head_count", 0)
    writer.add_float32(f"{architecture}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_uint32(f"{architecture}.vocab_size", 10)
    writer.add_tensor("token_embd.weight", np.zeros((10, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        ConfigError, match=rf"{architecture}\.attention\.head_count=0 must be a positive integer"
    ) as info:
        GGUF_FORMAT.load_config([path])
    assert str(path) in str(info.value)


@pytest.mark.parametrize(("kind", "value"), [("uint32", 0), ("int32", -5), ("uint64", 2**40), ("uint32", 2**24 + 1)])
def test_a_context_length_that_is_not_a_sane_positive_size_is_refused_naming_file_and_key(
    tmp_path: Path, kind: str, value: int
) -> None:
    """Position tables and rotary caches are sized from it: 0, negative and huge values fail before allocating."""
    path = tmp_path / "context.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_uint32("gpt2.block_count", 1)
    getattr(writer, f"add_{kind}")("gpt2.context_length", value)
    writer.add_uint32("gpt2.embedding_length", 32)
    writer.add_uint32("gpt2.feed_forward_length", 64)
    writer.add_uint32("gpt2.attention.head_count", 4)
    writer.add_float32("gpt2.attention.layer_norm_epsilon", 1e-5)
    writer.add_uint32("gpt2.vocab_size", 10)
    writer.add_tensor("token_embd.weight", np.zeros((10, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        ConfigError, match=rf"gpt2\.context_length={value} must be a positive number of tokens, at most 16,777,216"
    ) as info:
        GGUF_FORMAT.load_config([path])
    assert str(path) in str(info.value)


def test_the_largest_allowed_context_length_is_accepted(tmp_path: Path, gguf_writer: Callable[..., Path]) -> None:
    path = gguf_writer(tmp_path / "m.gguf", weights={})
    data = path.read_bytes()  # the writer's 256; the bound itself still loads (a 10M-token model is real)
    assert GGUF_FORMAT.load_config([path])["max_position_embeddings"] == 256
    key = b"llama.context_length"
    at = data.index(key) + len(key) + 4  # the value follows its uint32 type id
    patched = rewrite(path, data[:at] + struct.pack("<I", 2**24) + data[at + 4 :])
    assert GGUF_FORMAT.load_config([patched])["max_position_embeddings"] == 2**24

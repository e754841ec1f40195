"""Parsing a GGUF file: header, metadata and tensor table, each checked against the file's real size.

The ``gguf`` package's ``GGUFReader`` trusts the file: a truncated or corrupted header makes it read
garbage (or build arrays from any count the file claims), and it walks large string arrays one numpy
view at a time (seconds for a 50k-token vocabulary). This parser uses the package's constants (value
types, quantisation block sizes) but reads the header itself with bounds checks on every field, so a
bad file becomes a :class:`CheckpointError` naming the file and the field, never a hang or a crash.
Tensor data stays in a memory map and is only touched when a tensor is dequantised.
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
from pathlib import Path
from typing import Any

import attrs
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType

from microformers.errors import CheckpointError, FileMissingError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
# ggml tensors have at most 4 dimensions (GGML_MAX_DIMS).
MAX_DIMS = 4
MAX_ARRAY_NESTING = 8
HEADER_SIZE = 24

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

_SCALAR_FORMATS: dict[int, struct.Struct] = {
    GGUFValueType.UINT8: struct.Struct("<B"),
    GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"),
    GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: _U32,
    GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"),
    GGUFValueType.BOOL: struct.Struct("<B"),
    GGUFValueType.UINT64: _U64,
    GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}

_ARRAY_DTYPES: dict[int, str] = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "<u1",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}


@attrs.frozen
class TensorInfo:
    """One entry of the tensor table; ``dims`` in GGUF order (``dims[0]`` is the contiguous row length)."""

    name: str
    type_id: int
    dims: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The PyTorch shape: GGUF dimensions reversed."""
        return tuple(reversed(self.dims))

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.type_id).name

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.dims:
            count *= dim
        return count


@attrs.define
class GGUFFile:
    """A parsed GGUF file: its metadata, its tensor table and a copy-on-write memory map of its bytes."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    alignment: int
    data_offset: int
    file_size: int
    buffer: mmap.mmap = attrs.field(repr=False)

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    def tensor_bytes(self, info: TensorInfo) -> Any:
        """The raw bytes of one tensor as a ``torch.uint8`` tensor viewing the memory map (no copy)."""
        import torch

        return torch.frombuffer(self.buffer, dtype=torch.uint8, count=info.nbytes, offset=info.offset)


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse and validate ``path``; raises :class:`CheckpointError` for anything malformed."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError as exc:
        raise FileMissingError(f"GGUF file {path} does not exist; check the folder and the gguf_file name") from exc
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, not a GGUF file; pass the .gguf file's name as gguf_file")
    if size < HEADER_SIZE:
        raise CheckpointError(
            f"{path} is {size} bytes, too small to be a GGUF file (a GGUF header alone is {HEADER_SIZE} bytes); "
            "the file is truncated or not a GGUF file. Download it again."
        )
    with open(path, "rb") as handle:
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    return _Parser(path, buffer, size).parse()


class _Parser:
    def __init__(self, path: Path, buffer: mmap.mmap, size: int) -> None:
        self.path = path
        self.buffer = buffer
        self.size = size
        self.pos = 0

    # -- primitives --------------------------------------------------------------------------
    def fail(self, what: str) -> CheckpointError:
        return CheckpointError(f"GGUF file {self.path} is malformed: {what}. The file is corrupt; download it again.")

    def truncated(self, what: str) -> CheckpointError:
        return CheckpointError(
            f"GGUF file {self.path} is truncated: it ends (at {self.size} bytes) inside {what}. "
            "Download the file again; it was not completely written or copied."
        )

    def need(self, count: int, what: str) -> None:
        if count < 0 or self.pos + count > self.size:
            raise self.truncated(what)

    def u32(self, what: str) -> int:
        self.need(4, what)
        (value,) = _U32.unpack_from(self.buffer, self.pos)
        self.pos += 4
        return value

    def u64(self, what: str) -> int:
        self.need(8, what)
        (value,) = _U64.unpack_from(self.buffer, self.pos)
        self.pos += 8
        return value

    def string(self, what: str) -> str:
        length = self.u64(what)
        self.need(length, what)
        raw = self.buffer[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    # -- values ------------------------------------------------------------------------------
    def value(self, type_id: int, key: str, depth: int = 0) -> Any:
        if type_id == GGUFValueType.STRING:
            return self.string(f"the string value of metadata key '{key}'")
        scalar = _SCALAR_FORMATS.get(type_id)
        if scalar is not None:
            self.need(scalar.size, f"the value of metadata key '{key}'")
            (value,) = scalar.unpack_from(self.buffer, self.pos)
            self.pos += scalar.size
            return bool(value) if type_id == GGUFValueType.BOOL else value
        if type_id == GGUFValueType.ARRAY:
            if depth >= MAX_ARRAY_NESTING:
                raise self.fail(f"metadata key '{key}' nests arrays more than {MAX_ARRAY_NESTING} deep")
            item_type = self.u32(f"the array type of metadata key '{key}'")
            count = self.u64(f"the array length of metadata key '{key}'")
            return self.array(item_type, count, key, depth + 1)
        raise self.fail(f"metadata key '{key}' has value type {type_id}, which GGUF does not define")

    def array(self, item_type: int, count: int, key: str, depth: int) -> list[Any]:
        what = f"the array value of metadata key '{key}' ({count} items)"
        dtype = _ARRAY_DTYPES.get(item_type)
        if dtype is not None:
            itemsize = np.dtype(dtype).itemsize
            self.need(count * itemsize, what)
            values = np.frombuffer(self.buffer, dtype=dtype, count=count, offset=self.pos)
            self.pos += count * itemsize
            return (values != 0).tolist() if item_type == GGUFValueType.BOOL else values.tolist()
        if item_type == GGUFValueType.STRING:
            # Each string needs at least its 8-byte length: reject absurd counts before looping.
            self.need(count * 8, what)
            return self.string_array(count, what)
        if item_type == GGUFValueType.ARRAY:
            self.need(count * 12, what)
            return [self.value(GGUFValueType.ARRAY, key, depth) for _ in range(count)]
        raise self.fail(f"metadata key '{key}' is an array of value type {item_type}, which GGUF does not define")

    def string_array(self, count: int, what: str) -> list[str]:
        # The hot loop of header parsing (vocabularies, merges): locals only.
        buffer, pos, size, unpack = self.buffer, self.pos, self.size, _U64.unpack_from
        out: list[str] = [""] * count
        for index in range(count):
            if pos + 8 > size:
                raise self.truncated(what)
            (length,) = unpack(buffer, pos)
            pos += 8
            end = pos + length
            if end > size:
                raise self.truncated(what)
            out[index] = buffer[pos:end].decode("utf-8", errors="replace")
            pos = end
        self.pos = pos
        return out

    # -- file --------------------------------------------------------------------------------
    def parse(self) -> GGUFFile:
        magic = bytes(self.buffer[:4])
        if magic != GGUF_MAGIC:
            raise CheckpointError(
                f"{self.path} is not a GGUF file: it starts with {magic!r}, not the GGUF magic {GGUF_MAGIC!r}. "
                "Check that gguf_file names a llama.cpp .gguf file."
            )
        self.pos = 4
        version = self.u32("the version field")
        if version not in SUPPORTED_VERSIONS:
            if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
                raise CheckpointError(
                    f"GGUF file {self.path} is big-endian, which is not supported; convert it to a little-endian GGUF."
                )
            raise CheckpointError(
                f"GGUF file {self.path} has format version {version}; supported versions are "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))}. Re-convert it with a current llama.cpp."
            )
        tensor_count = self.u64("the tensor count")
        kv_count = self.u64("the metadata count")
        # Every key/value pair takes at least 12 bytes, every tensor entry at least 28.
        if kv_count * 12 + tensor_count * 28 > self.size - self.pos:
            raise self.truncated(f"its header, which claims {kv_count} metadata entries and {tensor_count} tensors")

        metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            key = self.string("a metadata key")
            type_id = self.u32(f"the type of metadata key '{key}'")
            if key in metadata:
                raise self.fail(f"metadata key '{key}' appears twice")
            metadata[key] = self.value(type_id, key)

        alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise self.fail(f"general.alignment is {alignment!r}, not a power of two")

        entries = [self.tensor_entry(index) for index in range(tensor_count)]
        data_offset = -(-self.pos // alignment) * alignment
        tensors: dict[str, TensorInfo] = {}
        for name, type_id, dims, relative_offset in entries:
            if name in tensors:
                raise self.fail(f"tensor '{name}' appears twice in the tensor table")
            tensors[name] = self.check_tensor(name, type_id, dims, relative_offset, data_offset, alignment)
        ordered = sorted(tensors.values(), key=lambda info: info.offset)
        for first, second in itertools.pairwise(ordered):
            if first.offset + first.nbytes > second.offset:
                raise self.fail(f"the data of tensors '{first.name}' and '{second.name}' overlap")
        return GGUFFile(
            path=self.path,
            version=version,
            metadata=metadata,
            tensors=tensors,
            alignment=alignment,
            data_offset=data_offset,
            file_size=self.size,
            buffer=self.buffer,
        )

    def tensor_entry(self, index: int) -> tuple[str, int, tuple[int, ...], int]:
        name = self.string(f"the name of tensor #{index}")
        n_dims = self.u32(f"the dimension count of tensor '{name}'")
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"tensor '{name}' has {n_dims} dimensions; GGUF tensors have 1 to {MAX_DIMS}")
        dims = tuple(self.u64(f"the shape of tensor '{name}'") for _ in range(n_dims))
        type_id = self.u32(f"the type of tensor '{name}'")
        offset = self.u64(f"the data offset of tensor '{name}'")
        return name, type_id, dims, offset

    def check_tensor(
        self, name: str, type_id: int, dims: tuple[int, ...], relative_offset: int, data_offset: int, alignment: int
    ) -> TensorInfo:
        try:
            ggml_type = GGMLQuantizationType(type_id)
            block_size, type_size = GGML_QUANT_SIZES[ggml_type]
        except (ValueError, KeyError):
            raise self.fail(
                f"tensor '{name}' has ggml type id {type_id}, which no known GGUF version defines "
                "(the file is corrupt, or newer than the installed gguf package: pip install -U gguf)"
            ) from None
        if any(dim <= 0 for dim in dims):
            raise self.fail(f"tensor '{name}' has shape {tuple(reversed(dims))} with an empty dimension")
        if dims[0] % block_size:
            raise self.fail(
                f"tensor '{name}' ({ggml_type.name}) has rows of {dims[0]} values, not a multiple of the "
                f"{block_size}-value {ggml_type.name} block"
            )
        n_elements = 1
        for dim in dims:
            n_elements *= dim
        nbytes = n_elements // block_size * type_size
        start = data_offset + relative_offset
        if relative_offset % alignment:
            raise self.fail(f"tensor '{name}' starts at data offset {relative_offset}, not aligned to {alignment}")
        if start + nbytes > self.size:
            raise CheckpointError(
                f"GGUF file {self.path} is truncated: tensor '{name}' ({ggml_type.name}, shape "
                f"{tuple(reversed(dims))}) needs bytes {start}..{start + nbytes}, but the file has {self.size} bytes. "
                "Download the file again."
            )
        return TensorInfo(name=name, type_id=int(ggml_type), dims=dims, offset=start, nbytes=nbytes)

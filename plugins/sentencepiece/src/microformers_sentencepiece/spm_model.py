"""Reading a SentencePiece ``.model`` file: its pieces, ids and normalizer, without protobuf.

``sentencepiece.SentencePieceProcessor`` validates the file (and Marian encodes with it); the few fields
the conversion to a ``tokenizers`` pipeline needs that its API does not expose (piece types, the
precompiled normalization charsmap) are read from the protobuf wire format directly, so the protobuf
package is not a dependency.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import attrs

from microformers.errors import ConfigError, FileMissingError

UNIGRAM, BPE = 1, 2
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@attrs.frozen
class Piece:
    piece: str
    score: float
    type: int = NORMAL


@attrs.frozen
class SpmModel:
    """What a SentencePiece model file holds that a tokenizer needs."""

    pieces: tuple[Piece, ...]
    model_type: int = UNIGRAM
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = -1
    byte_fallback: bool = False
    precompiled_charsmap: bytes = b""
    serialized: bytes = b""

    @property
    def vocab(self) -> list[tuple[str, float]]:
        return [(p.piece, p.score) for p in self.pieces]

    @property
    def special_pieces(self) -> list[str]:
        """Control and user-defined pieces, in id order (the reference makes them added tokens)."""
        return [p.piece for p in self.pieces if p.type in (CONTROL, USER_DEFINED)]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _fields(data: bytes) -> list[tuple[int, Any]]:
    """The (field number, value) pairs of one protobuf message: ints for varints, bytes for the rest."""
    out: list[tuple[int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated field")
        out.append((number, value))
    return out


def _int32(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def parse_model_proto(data: bytes) -> SpmModel:
    """Parse the bytes of a SentencePiece ``ModelProto``."""
    pieces: list[Piece] = []
    trainer: dict[int, Any] = {}
    normalizer: dict[int, Any] = {}
    for number, value in _fields(data):
        if number == 1:
            fields = dict(_fields(value))
            score = struct.unpack("<f", fields[2])[0] if 2 in fields else 0.0
            pieces.append(Piece(fields.get(1, b"").decode("utf-8"), score, int(fields.get(3, NORMAL))))
        elif number == 2:
            trainer = dict(_fields(value))
        elif number == 3:
            normalizer = dict(_fields(value))
    return SpmModel(
        pieces=tuple(pieces),
        model_type=int(trainer.get(3, UNIGRAM)),
        unk_id=_int32(trainer.get(40, 0)),
        bos_id=_int32(trainer.get(41, 1)),
        eos_id=_int32(trainer.get(42, 2)),
        pad_id=_int32(trainer.get(43, -1)),
        byte_fallback=bool(trainer.get(35, 0)),
        precompiled_charsmap=bytes(normalizer.get(2, b"")),
        serialized=data,
    )


def load_processor(data: bytes, where: str) -> Any:
    """A ``sentencepiece.SentencePieceProcessor`` for the model bytes; a ConfigError naming the file otherwise."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(data)
    except Exception as exc:  # sentencepiece raises RuntimeError/OSError depending on the failure
        raise ConfigError(
            f"{where} is not a valid SentencePiece model ({exc}); re-download it or save the tokenizer again."
        ) from exc
    return processor


def read_spm_bytes(data: bytes, where: str) -> SpmModel:
    """Validate with sentencepiece and parse; errors name ``where``."""
    load_processor(data, where)
    try:
        model = parse_model_proto(data)
    except (ValueError, UnicodeDecodeError, struct.error, KeyError) as exc:
        raise ConfigError(f"{where}: cannot read the SentencePiece model ({exc}); re-download it.") from exc
    if not model.pieces:
        raise ConfigError(f"{where}: the SentencePiece model has no pieces; re-download it.")
    return model


def read_spm_file(folder: Path, name: str, fix: str) -> SpmModel:
    """The SentencePiece model ``folder/name``; a FileMissingError naming it and ``fix`` when absent."""
    path = folder / name
    if not path.is_file():
        present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        raise FileMissingError(f"{path} is missing (found {present}); {fix}")
    return read_spm_bytes(path.read_bytes(), str(path))

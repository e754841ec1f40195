"""Bad tiktoken folders raise microformers errors naming the file and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

import microformers
from microformers.errors import ConfigError, FileMissingError, MicroformersError
from microformers_tiktoken import TiktokenTokenizer


def test_missing_rank_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileMissingError, match=r"tokenizer\.model is missing"):
        TiktokenTokenizer.from_pretrained(tmp_path)


def test_malformed_rank_line_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.model").write_text("IQ== 0\nnot-base64!! x\n", encoding="ascii")
    with pytest.raises(ConfigError, match=r"tokenizer\.model line 2"):
        TiktokenTokenizer.from_pretrained(tmp_path)


def test_a_sentencepiece_tokenizer_model_is_not_taken_for_tiktoken(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.model").write_bytes(b"\n\x0b\n\x05<unk>\x15\x00\x00\x00\x00\x18\x02")
    assert not TiktokenTokenizer.can_load(tmp_path)
    with pytest.raises(MicroformersError):
        microformers.AutoTokenizer.from_pretrained(tmp_path)

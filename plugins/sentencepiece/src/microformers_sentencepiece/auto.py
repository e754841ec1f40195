"""The backend ``AutoTokenizer`` asks with ``can_load`` when ``tokenizer_config.json`` names no class."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from microformers.errors import FileMissingError

from . import _files

# SentencePiece file -> the class the reference uses for a folder holding it.
_BY_FILE = {
    "spiece.model": ("fast", "T5Tokenizer"),
    "sentencepiece.bpe.model": ("fast", "MBartTokenizer"),
    "source.spm": ("marian", "MarianTokenizer"),
}


def _class_for(names: Any) -> Any:
    import importlib

    for file_name, (module, class_name) in _BY_FILE.items():
        if file_name in names:
            return getattr(importlib.import_module(f"{__package__}.{module}"), class_name)
    raise FileMissingError(
        f"no SentencePiece model among {sorted(names)}: expected one of {', '.join(_BY_FILE)} "
        "(T5, mBART, Marian). Add the model file, or name the tokenizer_class in tokenizer_config.json."
    )


class SentencePieceAuto:
    """Dispatches a folder to T5 (``spiece.model``), mBART (``sentencepiece.bpe.model``) or Marian (``source.spm``)."""

    @staticmethod
    def can_load(path: str | os.PathLike[str]) -> bool:
        return _files.can_load(path)

    @staticmethod
    def from_pretrained(path: str | os.PathLike[str], *inputs: Any, **kwargs: Any) -> Any:
        folder = Path(path)
        present = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        return _class_for(present).from_pretrained(folder, *inputs, **kwargs)

    @staticmethod
    def from_files(files: Mapping[str, Any], *inputs: Any, **kwargs: Any) -> Any:
        return _class_for(set(files)).from_files(files, *inputs, **kwargs)

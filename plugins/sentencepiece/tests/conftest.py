"""Tiny SentencePiece models trained on the corpus of ``spm_corpus`` and the folders the reference expects."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# The helper modules beside this file (spm_corpus, spm_parity); pytest's importlib mode does not add it.
sys.path.insert(0, str(Path(__file__).parent))

from spm_corpus import TRAINING


def train_spm(folder: Path, model_type: str, vocab_size: int, **options: Any) -> Path:
    import sentencepiece

    folder.mkdir(parents=True, exist_ok=True)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING * 3),
        model_prefix=str(folder / "m"),
        model_type=model_type,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
        **options,
    )
    (folder / "m.vocab").unlink()
    return folder / "m.model"


@pytest.fixture(scope="session")
def t5_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Unigram model with T5's ids: ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2, no ``<s>``."""
    return train_spm(tmp_path_factory.mktemp("t5-spm"), "unigram", 300, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)


@pytest.fixture(scope="session")
def bpe_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BPE model with fairseq's SentencePiece ids (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2)."""
    return train_spm(tmp_path_factory.mktemp("bpe-spm"), "bpe", 300)


@pytest.fixture(scope="session")
def target_bpe_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_spm(tmp_path_factory.mktemp("bpe-target-spm"), "bpe", 260)


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")


@pytest.fixture
def make_folder(tmp_path: Path) -> Callable[..., Path]:
    """A folder with ``model`` copied as ``name`` and, when given, tokenizer_config.json / special_tokens_map.json."""
    counter = iter(range(1000))

    def make(
        model: Path, name: str, config: dict[str, Any] | None = None, special: dict[str, Any] | None = None
    ) -> Path:
        folder = tmp_path / f"tok{next(counter)}"
        folder.mkdir()
        shutil.copyfile(model, folder / name)
        if config is not None:
            write_json(folder / "tokenizer_config.json", config)
        if special is not None:
            write_json(folder / "special_tokens_map.json", special)
        return folder

    return make


@pytest.fixture(scope="session")
def transformers_module() -> Any:
    """The reference implementation (test oracle only)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers

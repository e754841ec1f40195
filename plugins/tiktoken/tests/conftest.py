"""A tiny tiktoken rank file (the 256 bytes, then merges learnt on a small multilingual corpus)."""

from __future__ import annotations

import base64
import collections
import itertools
import re
from pathlib import Path
from typing import Any

import pytest

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2024, and we've paid $42.99!",
    "Der schnelle braune Fuchs springt über den faulen Hund; Größe: 1.250 m.",
    "Le renard brun rapide saute par-dessus le chien paresseux à Noël.",
    "Vulpea maro și rapidă sare peste câinele leneș în București.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 and punctuation: ,.;:!?()[]{}",
    "the the the and and and of of to to in in is is that that",
]


def learn_ranks(texts: list[str], merges: int = 150) -> dict[bytes, int]:
    """Byte-level BPE ranks: each byte its own rank, then the most frequent adjacent pair merged, repeatedly."""
    words: collections.Counter[tuple[bytes, ...]] = collections.Counter()
    for text in texts:
        for word in re.findall(r" ?\w+| ?[^\w\s]+|\s+", text):
            words[tuple(bytes([b]) for b in word.encode("utf-8"))] += 1
    ranks = {bytes([i]): i for i in range(256)}
    for _ in range(merges):
        pairs: collections.Counter[tuple[bytes, bytes]] = collections.Counter()
        for word, count in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += count
        if not pairs:
            break
        (a, b), _ = pairs.most_common(1)[0]
        ranks[a + b] = len(ranks)
        merged: collections.Counter[tuple[bytes, ...]] = collections.Counter()
        for word, count in words.items():
            out: list[bytes] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return ranks


@pytest.fixture(scope="session")
def ranks() -> dict[bytes, int]:
    return learn_ranks(CORPUS)


def write_ranks(path: Path, ranks: dict[bytes, int]) -> None:
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()), encoding="ascii")


@pytest.fixture
def tiktoken_folder(tmp_path: Path, ranks: dict[bytes, int]) -> Path:
    folder = tmp_path / "tiktoken"
    folder.mkdir()
    write_ranks(folder / "tokenizer.model", ranks)
    return folder


@pytest.fixture(scope="session")
def transformers_module() -> Any:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers

"""A tiktoken ``tokenizer.model`` folder gives the reference's ids (and tiktoken's own)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import microformers
from microformers_tiktoken import DEFAULT_PATTERN, TiktokenTokenizer

HELD_OUT = [
    "Hello world, this is a held-out sentence with 12345 numbers.",
    "Die Übersetzung war schwieriger als erwartet — 3,14 %.",
    "Où se trouve la gare ? Ça coûte 12,50 €.",
    "Școala începe în septembrie.\n\nNew paragraph\ttab  double  space ",
    "emoji 😀 and CJK 漢字 and Łódź",
    "don't I'LL you're WE'VE",
    "",
]
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]


def add_config(folder: Path, base: int, **extra: Any) -> None:
    # ids base and base + 1 listed, base + 2 left out (a gap the reference fills with a placeholder), base + 3 set.
    decoder = {
        str(base): {"content": SPECIALS[0], "special": True},
        str(base + 1): {"content": SPECIALS[1], "special": True},
        str(base + 3): {"content": SPECIALS[2], "special": True},
    }
    config = {"added_tokens_decoder": decoder, "bos_token": SPECIALS[0], "eos_token": SPECIALS[1], **extra}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def assert_same(ours: Any, ref: Any, texts: list[str]) -> None:
    assert len(ours) == len(ref)
    assert ours.get_vocab() == ref.get_vocab()
    for text in texts:
        expected, got = ref(text), ours(text)
        assert dict(got) == dict(expected), text
        for skip in (False, True):
            assert ours.decode(got["input_ids"], skip_special_tokens=skip) == ref.decode(
                expected["input_ids"], skip_special_tokens=skip
            )
    assert ours.all_special_ids == ref.all_special_ids


def test_ids_equal_the_reference_on_a_bare_rank_file(tiktoken_folder: Path, transformers_module: Any) -> None:
    ref = transformers_module.AutoTokenizer.from_pretrained(tiktoken_folder)
    ours = microformers.AutoTokenizer.from_pretrained(tiktoken_folder)
    assert_same(ours, ref, HELD_OUT)


@pytest.mark.parametrize(
    "extra", [{}, {"add_bos_token": True}, {"extra_special_tokens": ["<|pad|>"], "pad_token": "<|pad|>"}]
)
def test_special_tokens_from_the_config_equal_the_reference(
    tiktoken_folder: Path, ranks: dict[bytes, int], extra: dict[str, Any], transformers_module: Any
) -> None:
    add_config(tiktoken_folder, len(ranks), **extra)
    ref = transformers_module.AutoTokenizer.from_pretrained(tiktoken_folder)
    ours = microformers.AutoTokenizer.from_pretrained(tiktoken_folder)
    texts = [*HELD_OUT, f"{SPECIALS[0]}hi there{SPECIALS[2]} x {SPECIALS[1]}"]
    assert_same(ours, ref, texts)
    assert ours.convert_tokens_to_ids(f"<|reserved_token_{len(ranks) + 2}|>") == len(ranks) + 2
    assert (ours.bos_token_id, ours.eos_token_id) == (ref.bos_token_id, ref.eos_token_id)
    if "pad_token" in extra:
        assert dict(ours(texts, padding=True)) == dict(ref(texts, padding=True))


def test_ids_equal_tiktoken_itself(tiktoken_folder: Path, ranks: dict[bytes, int]) -> None:
    tiktoken = pytest.importorskip("tiktoken")
    encoding = tiktoken.Encoding(name="tiny", pat_str=DEFAULT_PATTERN, mergeable_ranks=ranks, special_tokens={})
    ours = TiktokenTokenizer.from_pretrained(tiktoken_folder)
    for text in HELD_OUT:
        assert ours(text)["input_ids"] == encoding.encode(text)
        assert ours.decode(encoding.encode(text)) == text


def test_save_pretrained_writes_a_tokenizer_json_that_loads_the_same(tiktoken_folder: Path, tmp_path: Path) -> None:
    ours = TiktokenTokenizer.from_pretrained(tiktoken_folder)
    ours.save_pretrained(tmp_path / "saved")
    again = microformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    for text in HELD_OUT:
        assert again(text)["input_ids"] == ours(text)["input_ids"]

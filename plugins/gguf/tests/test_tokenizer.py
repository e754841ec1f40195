"""Tokenizers rebuilt from GGUF vocabularies give the reference implementation's ids."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import pytest
import tokenizers

from microformers_gguf.format import GGUF_FORMAT
from microformers_gguf.tokenizer import derive_merges

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2_files(smollm2_folder: Path) -> dict[str, Any]:
    return GGUF_FORMAT.load_tokenizer_files(GGUF_FORMAT.find(smollm2_folder, gguf_file=SMOLLM2_FILE))


def assert_same_ids(ours: tokenizers.Tokenizer, reference: Any, corpus: dict[str, str]) -> None:
    for name, text in corpus.items():
        ids = ours.encode(text).ids
        assert ids == reference(text)["input_ids"], name
        assert ours.decode(ids, skip_special_tokens=False) == reference.decode(ids), name
        lines = [line for line in text.splitlines() if line.strip()][:200]
        assert [e.ids for e in ours.encode_batch(lines)] == reference(lines)["input_ids"], name


@pytest.fixture(scope="module")
def smollm2_reference(smollm2_folder: Path) -> Any:
    """The reference's GGUF tokenizer with SmolLM2's published pre-tokenizer (its tokenizer.json: digits one by
    one, then GPT-2's split). The reference's GGUF loader does not know ``tokenizer.ggml.pre = "smollm"`` and
    splits with GPT-2's regex alone, which differs where a digit follows whitespace ("：\n\n1." gives "Ċ", "Ċ"
    there, "ĊĊ" in SmolLM2's tokenizer and llama.cpp)."""
    from tokenizers import pre_tokenizers as pt

    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(smollm2_folder, gguf_file=SMOLLM2_FILE)
    tokenizer.backend_tokenizer.pre_tokenizer = pt.Sequence(
        [pt.Digits(individual_digits=True), pt.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    return tokenizer


@pytest.mark.slow
def test_smollm2_ids_match_reference_on_corpus(
    smollm2_files: dict[str, Any], smollm2_reference: Any, corpus: dict[str, str]
) -> None:
    ours = tokenizers.Tokenizer.from_str(smollm2_files["tokenizer.json"])
    assert_same_ids(ours, smollm2_reference, corpus)
    chat = "<|im_start|>user\nHola, ¿qué tal?<|im_end|>\n<|im_start|>assistant\n"
    assert ours.encode(chat).ids == smollm2_reference(chat)["input_ids"]
    assert ours.encode(chat).ids[0] == 1  # the control token stays whole


@pytest.mark.slow
def test_smollm2_tokenizer_config(smollm2_files: dict[str, Any], smollm2_reference: Any) -> None:
    config = smollm2_files["tokenizer_config.json"]
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert config[key] == str(getattr(smollm2_reference, key)), key
    assert config["chat_template"] == smollm2_reference.chat_template
    assert config["add_bos_token"] is False and config["add_eos_token"] is False
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["clean_up_tokenization_spaces"] is False
    assert config["model_max_length"] == smollm2_reference.model_max_length


def write_sentencepiece_gguf(path: Path, corpus: dict[str, str], *, with_merges: bool = False, **flags: bool) -> Path:
    """A llama-type (SentencePiece) vocabulary learned from the corpus: specials, 256 byte pieces, ▁ pieces."""
    model = tokenizers.Tokenizer(tokenizers.models.BPE(byte_fallback=True, unk_token="<unk>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    specials = ["<unk>", "<s>", "</s>", *(f"<0x{i:02X}>" for i in range(256))]
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=1500, special_tokens=specials, show_progress=False)
    model.train_from_iterator([text[:15000] for text in corpus.values()], trainer)
    trained = json.loads(model.to_str())["model"]
    vocab = trained["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    if with_merges:
        writer.add_token_merges([" ".join(pair) for pair in trained["merges"]])
    for key, value in flags.items():
        writer.add_bool(f"tokenizer.ggml.{key}", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.slow
@pytest.mark.parametrize("with_merges", [False, True], ids=["merges-derived", "merges-in-file"])
def test_sentencepiece_vocabulary_matches_reference(tmp_path: Path, corpus: dict[str, str], with_merges: bool) -> None:
    transformers = pytest.importorskip("transformers")
    path = write_sentencepiece_gguf(tmp_path / "sp.gguf", corpus, with_merges=with_merges)
    files = GGUF_FORMAT.load_tokenizer_files([path])
    ours = tokenizers.Tokenizer.from_str(files["tokenizer.json"])
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    assert_same_ids(ours, reference, corpus)
    assert ours.encode("hello").ids[0] == 1  # llama vocabularies add BOS unless the file says otherwise
    assert "<0xE4>" in ours.encode("\u4e00").tokens or len(ours.encode("\u4e00").ids) > 1  # byte fallback
    config = files["tokenizer_config.json"]
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert config["add_bos_token"] is True


def test_sentencepiece_flags(tmp_path: Path, corpus: dict[str, str]) -> None:
    path = write_sentencepiece_gguf(tmp_path / "sp.gguf", corpus, add_bos_token=False, add_eos_token=True)
    files = GGUF_FORMAT.load_tokenizer_files([path])
    ids = tokenizers.Tokenizer.from_str(files["tokenizer.json"]).encode("hello world").ids
    assert ids[0] != 1 and ids[-1] == 2
    assert files["tokenizer_config.json"]["add_bos_token"] is False
    assert files["tokenizer_config.json"]["add_eos_token"] is True


def test_byte_level_special_and_added_tokens(tmp_path: Path, gguf_writer: Callable[..., Path]) -> None:
    path = gguf_writer(
        tmp_path / "bpe.gguf",
        weights={},
        metadata={"tokenizer.ggml.add_eos_token": True, "tokenizer.chat_template": "{{ messages }}"},
    )
    files = GGUF_FORMAT.load_tokenizer_files([path])
    tokenizer_json = json.loads(files["tokenizer.json"])
    added = {t["content"]: t for t in tokenizer_json["added_tokens"]}
    assert {"<|endoftext|>", "<|im_start|>", "<|im_end|>"} <= set(added)
    assert all(t["special"] and not t["normalized"] for t in added.values())
    tokenizer = tokenizers.Tokenizer.from_str(files["tokenizer.json"])
    encoding = tokenizer.encode("<|im_start|> the the")
    assert encoding.tokens == ["<|im_start|>", "Ġthe", "Ġthe", "<|im_end|>"]  # merges applied, EOS appended
    assert tokenizer.decode(encoding.ids, skip_special_tokens=True) == " the the"
    assert files["tokenizer_config.json"]["chat_template"] == "{{ messages }}"
    assert files["tokenizer_config.json"]["bos_token"] == "<|im_start|>"


@pytest.mark.parametrize(("pre", "splits"), [("llama-bpe", True), ("qwen2", True), ("smollm", True), ("gpt-2", False)])
def test_pre_tokenizer_follows_ggml_pre(
    tmp_path: Path, gguf_writer: Callable[..., Path], pre: str, splits: bool
) -> None:
    path = gguf_writer(tmp_path / "pre.gguf", weights={}, pre=pre)
    tokenizer_json = json.loads(GGUF_FORMAT.load_tokenizer_files([path])["tokenizer.json"])
    assert (tokenizer_json["pre_tokenizer"]["type"] == "Sequence") is splits
    # 1234: the llama3 split keeps up to 3 digits together, qwen2 splits every digit.
    pieces = tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json)).pre_tokenizer.pre_tokenize_str("x 1234")
    expected = {
        "llama-bpe": ["x", "Ġ", "123", "4"],
        "qwen2": ["x", "Ġ", "1", "2", "3", "4"],
        "smollm": ["x", "Ġ", "1", "2", "3", "4"],  # StarCoder's split: digits one by one
        "gpt-2": ["x", "Ġ1234"],
    }
    if pre in expected:
        assert [p for p, _ in pieces] == expected[pre]


def test_derived_merges_follow_scores() -> None:
    tokens = ["a", "b", "c", "ab", "abc", "bc"]
    scores = [0.0, 0.0, 0.0, -1.0, -3.0, -2.0]
    merges = derive_merges(tokens, scores)
    # "ab" (score -1) first, then "bc" (-2), then the two ways to build "abc" (-3): longer left half first.
    assert merges == [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")]


# Texts on which pre-tokenizers disagree: digit runs, whitespace runs, punctuation, contractions, unicode.
SPLIT_TEXTS = [
    "Version 2024.11.27 costs $1,234,567.89 (12345 units); call 555-0100 x42! 7 77 777 7777",
    "tabs\t\tand   runs    of spaces  \n\n\n  and trailing   ",
    "Hello, world!!! What's up?! It's \"quoted\" -- (nested [brackets]) {x+=1; y<=2}... a|b ^c ~d `e`",
    "Café déjà vu — naïve façade; 東京タワー 서울 Москва १२३ ١٢٣ 🙂👍 …。，、 end.",
    "def f(x):\n    return x**2 + 0x1F  # comment\nabc123def 4.5e-3",
]


def family_pre_tokenizer(pre: str) -> Any:
    """The pre-tokenizer of the ``tokenizer.json`` published with the models that llama.cpp names ``pre``."""
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt

    byte_level = pt.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("starcoder", "smollm", "refact", "command-r"):  # StarCoder, SmolLM, Refact, Command-R
        return pt.Sequence([pt.Digits(individual_digits=True), byte_level])
    if pre == "falcon":
        return pt.Sequence(
            [
                pt.Punctuation("contiguous"),
                byte_level,
                pt.Digits(individual_digits=False),
                pt.Split(Regex("[0-9][0-9][0-9]"), "isolated"),
            ]
        )
    if pre in ("bloom", "poro-chat", "gpt3-finnish"):  # BLOOM and the models trained on its tokenizer
        return pt.Sequence(
            [
                pt.Split(Regex(" ?[^(\\s|[.,!?…。，、।۔،])]+"), "isolated"),
                pt.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise AssertionError(pre)


def trained_tokenizer(pre_tokenizer: Any, texts: list[str], size: int = 1200) -> tokenizers.Tokenizer:
    """A byte-level BPE learned on ``texts`` with ``pre_tokenizer`` (as the family's merges were learned)."""
    from tokenizers import decoders, models, trainers
    from tokenizers import pre_tokenizers as pt

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pt.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def gguf_vocab(tokenizer: tokenizers.Tokenizer) -> tuple[list[str], list[str], list[int]]:
    model = json.loads(tokenizer.to_str())["model"]
    tokens = [token for token, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges, [3, 3, 3] + [1] * (len(tokens) - 3)


def rebuilt(path: Path) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_str(GGUF_FORMAT.load_tokenizer_files([path])["tokenizer.json"])


def split_texts(corpus: dict[str, str]) -> list[str]:
    lines = [line for text in corpus.values() for line in text.splitlines()[:60]]
    return SPLIT_TEXTS + lines


@pytest.mark.parametrize(
    "pre", ["starcoder", "smollm", "refact", "command-r", "falcon", "bloom", "poro-chat", "gpt3-finnish"]
)
def test_family_split_gives_the_family_tokenizers_ids(
    tmp_path: Path, gguf_writer: Callable[..., Path], corpus: dict[str, str], pre: str
) -> None:
    """The rebuilt tokenizer encodes like the family's own tokenizer.json, on a vocabulary learned with its split.

    (The reference's GGUF conversion does not know these ``tokenizer.ggml.pre`` values and splits them with
    GPT-2's regex, so it is no oracle here; the family's published pre-tokenizer is.)"""
    texts = split_texts(corpus)
    original = trained_tokenizer(family_pre_tokenizer(pre), texts)
    ours = rebuilt(gguf_writer(tmp_path / "family.gguf", weights={}, pre=pre, vocab=gguf_vocab(original)))
    for text in texts:
        assert ours.encode(text).ids == original.encode(text).ids, text
        assert ours.decode(ours.encode(text).ids) == text
    if pre != "falcon":  # llama.cpp's falcon keeps " 12" whole where Falcon's Digits splits off the space:
        # the ids agree (no merge joins a space to digits in such a vocabulary), the pieces need not
        for text in SPLIT_TEXTS:
            pieces = [p for p, _ in ours.pre_tokenizer.pre_tokenize_str(text)]
            assert pieces == [p for p, _ in original.pre_tokenizer.pre_tokenize_str(text)], text


@pytest.mark.parametrize("pre", ["falcon", "bloom"])
def test_gpt2_split_would_give_other_ids_for_these_families(
    tmp_path: Path, gguf_writer: Callable[..., Path], corpus: dict[str, str], pre: str
) -> None:
    """What the family split fixes: GPT-2's regex (the fallback before) encodes these vocabularies differently."""
    texts = split_texts(corpus)
    original = trained_tokenizer(family_pre_tokenizer(pre), texts)
    gpt2 = rebuilt(gguf_writer(tmp_path / "gpt2.gguf", weights={}, pre="gpt-2", vocab=gguf_vocab(original)))
    assert any(gpt2.encode(text).ids != original.encode(text).ids for text in texts)


def test_starcoder_family_splits_every_digit(tmp_path: Path, gguf_writer: Callable[..., Path]) -> None:
    ours = rebuilt(gguf_writer(tmp_path / "sc.gguf", weights={}, pre="starcoder"))
    pieces = [p for p, _ in ours.pre_tokenizer.pre_tokenize_str("x 2024, ok")]
    assert pieces == ["x", "Ġ", "2", "0", "2", "4", ",", "Ġok"]


@pytest.mark.parametrize("pre", ["llama-bpe", "qwen2", "dbrx", "tekken", "gpt-4o"])
def test_split_matches_the_reference_gguf_conversion(
    tmp_path: Path, gguf_writer: Callable[..., Path], corpus: dict[str, str], pre: str
) -> None:
    """For the ``tokenizer.ggml.pre`` values the reference's GGUF loader knows, the same ids as its tokenizer, on a
    vocabulary learned with no split at all (its merges cross every boundary, so any split difference shows)."""
    from tokenizers import pre_tokenizers as pt

    transformers = pytest.importorskip("transformers")
    texts = split_texts(corpus)
    vocab = gguf_vocab(trained_tokenizer(pt.ByteLevel(add_prefix_space=False, use_regex=False), texts, size=2000))
    path = gguf_writer(tmp_path / "ref.gguf", weights={}, pre=pre, vocab=vocab)
    ours = rebuilt(path)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in texts:
        assert (
            ours.encode(text, add_special_tokens=False).ids == reference(text, add_special_tokens=False)["input_ids"]
        ), text


def test_deepseek_splits(tmp_path: Path, gguf_writer: Callable[..., Path]) -> None:
    llm = rebuilt(gguf_writer(tmp_path / "ds.gguf", weights={}, pre="deepseek-llm"))
    coder = rebuilt(gguf_writer(tmp_path / "dsc.gguf", weights={}, pre="deepseek-coder"))
    text = "Hi there,\n東京 2024!"
    # deepseek-llm: newlines alone, letters with one leading space, ASCII punctuation runs, CJK runs, digit runs
    assert [p for p, _ in llm.pre_tokenizer.pre_tokenize_str(text)] == [
        "Hi", "Ġthere", ",", "Ċ", "æĿ±äº¬", "Ġ", "2024", "!"
    ]  # fmt: skip
    # deepseek-coder: digits one by one
    assert [p for p, _ in coder.pre_tokenizer.pre_tokenize_str(text)] == [
        "Hi", "Ġthere", ",", "Ċ", "æĿ±äº¬", "Ġ", "2", "0", "2", "4", "!"
    ]  # fmt: skip


def test_unknown_pre_value_warns_and_splits_like_gpt2(
    tmp_path: Path, gguf_writer: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    path = gguf_writer(tmp_path / "odd.gguf", weights={}, pre="no-such-pre")
    with caplog.at_level(logging.WARNING, logger="microformers"):
        tokenizer_json = json.loads(GGUF_FORMAT.load_tokenizer_files([path])["tokenizer.json"])
    assert "tokenizer.ggml.pre 'no-such-pre' is not one microformers-gguf knows" in caplog.text
    assert "odd.gguf" in caplog.text
    assert tokenizer_json["pre_tokenizer"] == {
        "type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True
    }  # fmt: skip
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="microformers"):
        GGUF_FORMAT.load_tokenizer_files([gguf_writer(tmp_path / "gpt2.gguf", weights={}, pre="gpt-2")])
    assert "tokenizer.ggml.pre" not in caplog.text  # GPT-2's own split: nothing to say

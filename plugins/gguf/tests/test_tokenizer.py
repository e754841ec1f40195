"""Tokenizers rebuilt from GGUF vocabularies give the reference implementation's ids."""

from __future__ import annotations

import json
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


@pytest.fixture(scope="module")
def smollm2_reference(smollm2_folder: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(smollm2_folder, gguf_file=SMOLLM2_FILE)


def assert_same_ids(ours: tokenizers.Tokenizer, reference: Any, corpus: dict[str, str]) -> None:
    for name, text in corpus.items():
        ids = ours.encode(text).ids
        assert ids == reference(text)["input_ids"], name
        assert ours.decode(ids, skip_special_tokens=False) == reference.decode(ids), name
        lines = [line for line in text.splitlines() if line.strip()][:200]
        assert [e.ids for e in ours.encode_batch(lines)] == reference(lines)["input_ids"], name


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


@pytest.mark.parametrize(("pre", "splits"), [("llama-bpe", True), ("qwen2", True), ("smollm", False)])
def test_pre_tokenizer_follows_ggml_pre(
    tmp_path: Path, gguf_writer: Callable[..., Path], pre: str, splits: bool
) -> None:
    path = gguf_writer(tmp_path / "pre.gguf", weights={}, pre=pre)
    tokenizer_json = json.loads(GGUF_FORMAT.load_tokenizer_files([path])["tokenizer.json"])
    assert (tokenizer_json["pre_tokenizer"]["type"] == "Sequence") is splits
    # 1234: the llama3 split keeps up to 3 digits together, qwen2 splits every digit.
    pieces = tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json)).pre_tokenizer.pre_tokenize_str("x 1234")
    expected = {"llama-bpe": ["x", "Ġ", "123", "4"], "qwen2": ["x", "Ġ", "1", "2", "3", "4"]}
    if pre in expected:
        assert [p for p, _ in pieces] == expected[pre]


def test_derived_merges_follow_scores() -> None:
    tokens = ["a", "b", "c", "ab", "abc", "bc"]
    scores = [0.0, 0.0, 0.0, -1.0, -3.0, -2.0]
    merges = derive_merges(tokens, scores)
    # "ab" (score -1) first, then "bc" (-2), then the two ways to build "abc" (-3): longer left half first.
    assert merges == [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")]

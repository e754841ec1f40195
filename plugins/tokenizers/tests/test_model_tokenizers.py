"""Model-specific tokenizer classes (BertTokenizer, DistilBertTokenizer, GPT2Tokenizer, RobertaTokenizer and their
``Fast`` names) against the reference's classes of the same names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import microformers
from microformers.errors import ConfigError, FileMissingError
from microformers_tokenizers import (
    BertTokenizer,
    BertTokenizerFast,
    DistilBertTokenizer,
    DistilBertTokenizerFast,
    GPT2Tokenizer,
    GPT2TokenizerFast,
    PreTrainedTokenizerFast,
    RobertaTokenizer,
    RobertaTokenizerFast,
)

TEXTS = ["Hello World, héllo!", "The quick brown fox jumps over the lazy dog.", "a  b\tc 42"]
PAIRS = (["What is it?", "A fox."], ["It jumps.", "Over the dog, twice."])


@pytest.fixture(scope="module")
def transformers_module() -> Any:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


def _same_encodings(ours: Any, theirs: Any) -> None:
    for call in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 6}):
        assert ours(TEXTS, **call) == dict(theirs(TEXTS, **call)), call
    assert ours(*PAIRS, padding=True) == dict(theirs(*PAIRS, padding=True))
    ids = theirs(TEXTS[1])["input_ids"]
    assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)


def test_fast_names_are_the_same_classes_and_exported_at_the_top_level() -> None:
    pairs = [(BertTokenizer, BertTokenizerFast), (DistilBertTokenizer, DistilBertTokenizerFast),
             (GPT2Tokenizer, GPT2TokenizerFast), (RobertaTokenizer, RobertaTokenizerFast)]  # fmt: skip
    for slow_name, fast_name in pairs:
        assert slow_name is fast_name
        assert issubclass(slow_name, PreTrainedTokenizerFast)
        assert getattr(microformers, slow_name.__name__) is slow_name
        assert getattr(microformers, f"{slow_name.__name__}Fast") is slow_name


@pytest.mark.parametrize("name", ["BertTokenizer", "DistilBertTokenizer"])
def test_bert_classes_load_a_folder_as_the_reference_does(name: str, minilm_dir: Path, transformers_module: Any) -> None:
    ours = getattr(microformers, name).from_pretrained(minilm_dir)
    theirs = getattr(transformers_module, name).from_pretrained(str(minilm_dir))
    assert type(ours).__name__ == name
    assert ours.model_input_names == list(theirs.model_input_names)
    _same_encodings(ours, theirs)


def test_auto_tokenizer_returns_the_class_the_config_names(
    minilm_dir: Path, make_bpe_dir: Any, transformers_module: Any
) -> None:
    bert = microformers.AutoTokenizer.from_pretrained(minilm_dir)
    assert type(bert) is BertTokenizer
    assert type(bert).__name__ == type(transformers_module.AutoTokenizer.from_pretrained(str(minilm_dir))).__name__
    gpt2 = microformers.AutoTokenizer.from_pretrained(make_bpe_dir("GPT2TokenizerFast"))
    assert type(gpt2) is GPT2Tokenizer
    generic = microformers.AutoTokenizer.from_pretrained(make_bpe_dir("PreTrainedTokenizerFast"))
    assert type(generic) is PreTrainedTokenizerFast


def test_use_fast_false_gives_the_same_tokenizer_as_the_reference_does(
    minilm_dir: Path, transformers_module: Any
) -> None:
    slow = microformers.AutoTokenizer.from_pretrained(minilm_dir, use_fast=False)
    reference = transformers_module.AutoTokenizer.from_pretrained(str(minilm_dir), use_fast=False)
    assert type(slow).__name__ == type(reference).__name__ == "BertTokenizer"
    _same_encodings(slow, reference)


def test_a_class_keeps_its_behaviour_whatever_the_folder_names(make_bpe_dir: Any, transformers_module: Any) -> None:
    folder = make_bpe_dir("PreTrainedTokenizerFast")
    ours = RobertaTokenizer.from_pretrained(folder)
    theirs = transformers_module.RobertaTokenizer.from_pretrained(str(folder))
    assert type(ours) is RobertaTokenizer
    _same_encodings(ours, theirs)
    assert ours("a b")["input_ids"][0] == ours.convert_tokens_to_ids(ours.cls_token)


def test_bert_tokenizer_from_a_vocabulary_matches_the_reference(minilm_dir: Path, transformers_module: Any) -> None:
    vocab_file = minilm_dir / "vocab.txt"
    ours = BertTokenizer(str(vocab_file))
    theirs = transformers_module.BertTokenizer(str(vocab_file))
    _same_encodings(ours, theirs)
    assert BertTokenizer(vocab_file=str(vocab_file))(TEXTS)["input_ids"] == ours(TEXTS)["input_ids"]
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5, "world": 6, "##s": 7}
    small, reference = BertTokenizer(vocab, do_lower_case=True), transformers_module.BertTokenizer(vocab)
    assert small(["Hello worlds", "x"]) == dict(reference(["Hello worlds", "x"]))
    assert BertTokenizer().get_vocab() == transformers_module.BertTokenizer().get_vocab()


@pytest.mark.parametrize("name", ["GPT2Tokenizer", "RobertaTokenizer"])
def test_bpe_tokenizers_from_vocab_and_merges_match_the_reference(
    name: str, bpe_json: str, tmp_path: Path, transformers_module: Any
) -> None:
    model = json.loads(bpe_json)["model"]
    vocab = dict(model["vocab"])
    for token in ("<s>", "</s>", "<pad>", "<unk>", "<mask>"):
        vocab.setdefault(token, len(vocab))
    merges = [" ".join(merge) if isinstance(merge, list) else merge for merge in model["merges"]]
    ours = getattr(microformers, name)(vocab, merges, pad_token="<pad>")
    pairs = [tuple(merge.split(" ")) for merge in merges]  # the reference's BPE takes pairs only
    theirs = getattr(transformers_module, name)(vocab=vocab, merges=pairs, pad_token="<pad>")
    _same_encodings(ours, theirs)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    from_files = getattr(microformers, name)(vocab_file=str(tmp_path / "vocab.json"), merges_file=str(tmp_path / "merges.txt"))
    assert from_files(TEXTS)["input_ids"] == ours(TEXTS)["input_ids"]


def test_saved_model_tokenizer_reloads_as_its_class(minilm_dir: Path, tmp_path: Path) -> None:
    DistilBertTokenizer.from_pretrained(minilm_dir).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "DistilBertTokenizer"
    reloaded = microformers.AutoTokenizer.from_pretrained(tmp_path)
    assert type(reloaded) is DistilBertTokenizer
    assert "token_type_ids" not in reloaded("a b")


def test_bad_vocabularies_are_refused_naming_the_argument(tmp_path: Path) -> None:
    with pytest.raises(FileMissingError, match="vocab.txt"):
        BertTokenizer(str(tmp_path / "missing.txt"))
    with pytest.raises(ConfigError, match="vocab or vocab_file"):
        BertTokenizer({"a": 0}, vocab_file="x.txt")
    with pytest.raises(ConfigError, match="takes no merges"):
        BertTokenizer({"a": 0}, ["a b"])
    with pytest.raises(ConfigError, match="two tokens"):
        GPT2Tokenizer({"a": 0, "b": 1}, ["a b c"])
    (tmp_path / "vocab.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        GPT2Tokenizer(str(tmp_path / "vocab.json"), [])

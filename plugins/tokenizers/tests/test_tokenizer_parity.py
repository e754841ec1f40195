"""Ids, masks, token type ids, offsets and decoding equal the reference implementation's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from microformers_tokenizers import BatchEncoding, PreTrainedTokenizerFast

CALLS: list[dict[str, Any]] = [
    {},
    {"padding": True},
    {"padding": "longest", "truncation": True, "max_length": 24},
    {"padding": True, "truncation": True, "max_length": 24, "padding_side": "left"},
    {"padding": "max_length", "truncation": "longest_first", "max_length": 48},
    {"padding": "max_length", "truncation": True, "max_length": 48, "pad_to_multiple_of": 16, "padding_side": "left"},
    {"padding": True, "pad_to_multiple_of": 8},
    {"truncation": True, "max_length": 16, "stride": 4, "return_overflowing_tokens": True},
    {"max_length": 20},
    {"truncation": True},
    {"padding": "max_length"},
    {"add_special_tokens": False, "return_special_tokens_mask": True, "return_length": True},
]
PAIR_CALLS: list[dict[str, Any]] = [
    {},
    {"padding": True, "truncation": "only_second", "max_length": 200},
    {"padding": True, "truncation": "only_first", "max_length": 200, "padding_side": "left"},
    {"truncation": "longest_first", "max_length": 30, "padding": "max_length"},
]
ALIGNMENT = {"return_offsets_mapping": True, "return_token_type_ids": True, "return_attention_mask": True}
# LlamaTokenizer on a byte-level tokenizer.json: served as-is (the reference's AutoTokenizer does the same).
BPE_CLASSES = ["PreTrainedTokenizerFast", "GPT2Tokenizer", "Qwen2Tokenizer", "LlamaTokenizer"]


def _folders(request: pytest.FixtureRequest, name: str) -> Path:
    if name == "minilm":
        return request.getfixturevalue("minilm_dir")
    return request.getfixturevalue("make_bpe_dir")(name)


@pytest.fixture(scope="module", params=["minilm", *BPE_CLASSES])
def pair(request: pytest.FixtureRequest, reference: Any) -> tuple[PreTrainedTokenizerFast, Any]:
    folder = _folders(request, request.param)
    return PreTrainedTokenizerFast.from_pretrained(folder), reference.from_pretrained(str(folder))


def assert_same(ours: Any, theirs: Any) -> None:
    assert sorted(ours.keys()) == sorted(theirs.keys())
    for key in theirs.keys():
        assert ours[key] == theirs[key], key


@pytest.mark.parametrize("call", CALLS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_batched_encoding_matches_reference(pair: Any, sample: list[str], call: dict[str, Any]) -> None:
    ours, ref = pair
    result = ours(sample, **call, **ALIGNMENT)
    assert isinstance(result, BatchEncoding) and isinstance(result, dict)
    assert_same(result, ref(sample, **call, **ALIGNMENT))


@pytest.mark.parametrize("call", CALLS[:6], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_single_text_matches_reference(pair: Any, sample: list[str], call: dict[str, Any]) -> None:
    ours, ref = pair
    for text in sample[::10]:
        assert_same(ours(text, **call, **ALIGNMENT), ref(text, **call, **ALIGNMENT))
        assert ours.encode(text, **call) == ref.encode(text, **call)
        assert ours.tokenize(text) == ref.tokenize(text)


@pytest.mark.parametrize("call", PAIR_CALLS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_pairs_match_reference(pair: Any, sample: list[str], call: dict[str, Any]) -> None:
    ours, ref = pair
    first, second = sample[:30], sample[30:60]
    assert_same(ours(first, second, **call, **ALIGNMENT), ref(first, second, **call, **ALIGNMENT))
    as_tuples = list(zip(first, second))
    assert_same(ours(as_tuples, **call), ref(as_tuples, **call))
    assert_same(ours(first[0], second[0], **call), ref(first[0], second[0], **call))


def test_tensors_match_reference(pair: Any, sample: list[str]) -> None:
    import numpy as np

    ours, ref = pair
    for kind in ("pt", "np"):
        a = ours(sample[:8], padding=True, return_tensors=kind)
        b = ref(sample[:8], padding=True, return_tensors=kind)
        for key in b.keys():
            assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key
            assert str(a[key].dtype) == str(b[key].dtype)
    single = ours(sample[0], return_tensors="pt")
    assert tuple(single["input_ids"].shape) == tuple(ref(sample[0], return_tensors="pt")["input_ids"].shape)
    moved = single.to("cpu")
    assert moved is single and moved.input_ids.device.type == "cpu"


def test_word_ids_and_alignment(pair: Any, sample: list[str]) -> None:
    ours, ref = pair
    a, b = ours(sample[:5]), ref(sample[:5])
    for row in range(5):
        assert a.word_ids(row) == b.word_ids(row)
        assert a.tokens(row) == b.tokens(row)
        assert a.sequence_ids(row) == b.sequence_ids(row)
    assert a.char_to_token(1, 3) == b.char_to_token(1, 3)
    assert a.token_to_chars(1, 2) == tuple(b.token_to_chars(1, 2))
    assert a.encodings[0].ids == a.input_ids[0]


def test_decode_round_trips_match_reference(pair: Any, sample: list[str]) -> None:
    ours, ref = pair
    batch = ours(sample, padding=True)["input_ids"]
    for skip in (False, True):
        for clean in (None, True, False):
            assert ours.batch_decode(
                batch, skip_special_tokens=skip, clean_up_tokenization_spaces=clean
            ) == ref.batch_decode(batch, skip_special_tokens=skip, clean_up_tokenization_spaces=clean)
    for ids in batch[::7]:
        assert ours.decode(ids) == ref.decode(ids)
        assert ours.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    assert ours.decode(batch[:3]) == ref.decode(batch[:3])
    import torch

    assert ours.decode(torch.tensor(batch[0])) == ref.decode(batch[0])
    assert ours.decode(batch[0][1]) == ref.decode(batch[0][1])


def test_vocabulary_and_special_tokens_match_reference(pair: Any, sample: list[str]) -> None:
    ours, ref = pair
    assert len(ours) == len(ref)
    assert ours.vocab_size == ref.vocab_size
    assert ours.get_vocab() == ref.get_vocab()
    assert ours.model_max_length == ref.model_max_length
    assert ours.padding_side == ref.padding_side and ours.truncation_side == ref.truncation_side
    assert ours.model_input_names == ref.model_input_names
    assert ours.clean_up_tokenization_spaces == ref.clean_up_tokenization_spaces
    assert ours.special_tokens_map == ref.special_tokens_map
    assert ours.all_special_tokens == ref.all_special_tokens
    assert ours.all_special_ids == ref.all_special_ids
    for name in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        assert getattr(ours, f"{name}_token") == getattr(ref, f"{name}_token"), name
        assert getattr(ours, f"{name}_token_id") == getattr(ref, f"{name}_token_id"), name
    assert ours.added_tokens_encoder == ref.added_tokens_encoder
    assert ours.num_special_tokens_to_add() == ref.num_special_tokens_to_add()
    assert ours.num_special_tokens_to_add(pair=True) == ref.num_special_tokens_to_add(pair=True)
    tokens = ours.tokenize(sample[3])
    ids = ours.convert_tokens_to_ids(tokens)
    assert ids == ref.convert_tokens_to_ids(tokens)
    assert ours.convert_ids_to_tokens(ids) == tokens == ref.convert_ids_to_tokens(ids)
    assert ours.convert_tokens_to_ids("never-a-token-\u2603\u2603") == ref.convert_tokens_to_ids(
        "never-a-token-\u2603\u2603"
    )
    assert ours.convert_tokens_to_string(tokens) == ref.convert_tokens_to_string(tokens)
    with_special = ours(sample[3])["input_ids"]
    assert ours.convert_ids_to_tokens(with_special, skip_special_tokens=True) == ref.convert_ids_to_tokens(
        with_special, skip_special_tokens=True
    )
    assert ours.get_special_tokens_mask(with_special, already_has_special_tokens=True) == ref.get_special_tokens_mask(
        with_special, already_has_special_tokens=True
    )


@pytest.mark.parametrize("name", ["minilm", "GPT2Tokenizer"])
def test_added_tokens_match_reference(
    request: pytest.FixtureRequest, reference: Any, name: str, sample: list[str]
) -> None:
    folder = _folders(request, name)
    ours, ref = PreTrainedTokenizerFast.from_pretrained(folder), reference.from_pretrained(str(folder))
    for tok in (ours, ref):
        assert tok.add_tokens(["microformerísimo", "数据集合"]) == 2
        assert tok.add_tokens("microformerísimo") == 0
        assert tok.add_special_tokens({"extra_special_tokens": ["<tool>"], "sep_token": "<sepx>"}) >= 1
    text = "Un microformerísimo <tool> con 数据集合 <sepx> fin. " + sample[2]
    assert_same(ours(text, **ALIGNMENT), ref(text, **ALIGNMENT))
    assert ours.extra_special_tokens == ref.extra_special_tokens == ["<tool>"]
    assert ours.sep_token_id == ref.sep_token_id
    ids = ours.encode(text)
    assert ours.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    assert len(ours) == len(ref)


def test_pad_token_handling(make_bpe_dir: Any, reference: Any, sample: list[str]) -> None:
    folder = make_bpe_dir("GPT2Tokenizer", pad_token=None)
    ours, ref = PreTrainedTokenizerFast.from_pretrained(folder), reference.from_pretrained(str(folder))
    assert ours.pad_token is None and ref.pad_token is None
    from microformers.errors import ConfigError

    with pytest.raises(ConfigError, match="pad_token"):
        ours(sample[:3], padding=True)
    ours.pad_token = ours.eos_token
    ref.pad_token = ref.eos_token
    assert ours.pad_token_id == ref.pad_token_id
    assert_same(ours(sample[:6], padding=True), ref(sample[:6], padding=True))
    ours.pad_token_id = 3
    assert ours.pad_token == "<pad>"


def test_pad_method_matches_reference(pair: Any, sample: list[str]) -> None:
    ours, ref = pair
    features = [{k: v for k, v in ours(text).items()} for text in sample[:5]]
    for kwargs in ({}, {"padding": "max_length", "max_length": 600}, {"pad_to_multiple_of": 8, "padding_side": "left"}):
        assert_same(ours.pad(features, **kwargs), ref.pad([dict(f) for f in features], **kwargs))
    a = ours.pad(features, return_tensors="pt")
    assert a["input_ids"].shape[0] == 5


def test_model_max_length_and_clean_up_defaults(make_bpe_dir: Any, reference: Any) -> None:
    folder = make_bpe_dir("PreTrainedTokenizerFast", model_max_length=None, clean_up_tokenization_spaces=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("model_max_length")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    ours, ref = PreTrainedTokenizerFast.from_pretrained(folder), reference.from_pretrained(str(folder))
    assert ours.model_max_length == ref.model_max_length == int(1e30)
    assert ours.clean_up_tokenization_spaces is True
    text = "Hello , world ! It 's here ."
    # BPE output is never "cleaned" unless forced, like the reference.
    assert ours.decode(ours.encode(text)) == ref.decode(ref.encode(text)) == text
    assert ours(text, truncation=True)["input_ids"] == ref(text, truncation=True)["input_ids"]


def test_save_pretrained_loads_in_reference(pair: Any, tmp_path: Path, reference: Any, sample: list[str]) -> None:
    ours, ref = pair
    ours.add_tokens(["añadido"])
    ref.add_tokens(["añadido"])
    ours.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    files = ours.save_pretrained(tmp_path / "saved")
    assert {Path(f).name for f in files} >= {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}
    assert not [p for p in (tmp_path / "saved").iterdir() if p.name.endswith(".tmp")]
    reloaded_ref = reference.from_pretrained(str(tmp_path / "saved"))
    reloaded = PreTrainedTokenizerFast.from_pretrained(tmp_path / "saved")
    texts = [*sample[:20], "un token añadido"]
    expected = ref(texts, padding=True, truncation=True, max_length=40)
    assert_same(reloaded_ref(texts, padding=True, truncation=True, max_length=40), expected)
    assert_same(reloaded(texts, padding=True, truncation=True, max_length=40), expected)
    assert reloaded_ref.special_tokens_map == ref.special_tokens_map
    assert reloaded_ref.model_max_length == ref.model_max_length
    assert reloaded_ref.chat_template == ours.chat_template == reloaded.chat_template
    assert type(reloaded_ref).__name__ == type(ref).__name__


@pytest.mark.parametrize("with_config", [False, True])
def test_vocab_txt_only_bert_folder(
    minilm_dir: Path, tmp_path: Path, reference: Any, sample: list[str], with_config: bool
) -> None:
    folder = tmp_path / "bert"
    folder.mkdir()
    shutil.copy(minilm_dir / "vocab.txt", folder / "vocab.txt")
    if with_config:
        (folder / "tokenizer_config.json").write_text(
            json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": False, "model_max_length": 128})
        )
    else:
        (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert PreTrainedTokenizerFast.can_load(folder)
    ours, ref = PreTrainedTokenizerFast.from_pretrained(folder), reference.from_pretrained(str(folder))
    assert_same(
        ours(sample, padding=True, truncation=True, **ALIGNMENT),
        ref(sample, padding=True, truncation=True, **ALIGNMENT),
    )
    assert ours.special_tokens_map == ref.special_tokens_map
    assert ours.model_max_length == ref.model_max_length
    ids = ours(sample[:10])["input_ids"]
    assert ours.batch_decode(ids, skip_special_tokens=True) == ref.batch_decode(ids, skip_special_tokens=True)


def test_from_files_equals_from_pretrained(make_bpe_dir: Any, sample: list[str]) -> None:
    folder = make_bpe_dir("GPT2Tokenizer")
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    files = {
        "tokenizer.json": (folder / "tokenizer.json").read_text(),
        "tokenizer_config.json": json.loads((folder / "tokenizer_config.json").read_text()),
        "chat_template.jinja": "{{ messages[0]['content'] }}",
    }
    a = PreTrainedTokenizerFast.from_files(files)
    b = PreTrainedTokenizerFast.from_pretrained(folder)
    assert a(sample, padding=True) == b(sample, padding=True)
    assert a.chat_template == b.chat_template
    assert a.special_tokens_map == b.special_tokens_map


def test_user_kwargs_override_config(minilm_dir: Path, reference: Any, sample: list[str]) -> None:
    ours = PreTrainedTokenizerFast.from_pretrained(minilm_dir, padding_side="left", model_max_length=32)
    ref = reference.from_pretrained(str(minilm_dir), padding_side="left", model_max_length=32)
    assert ours.padding_side == "left" and ours.model_max_length == 32
    assert_same(ours(sample[:10], padding=True, truncation=True), ref(sample[:10], padding=True, truncation=True))

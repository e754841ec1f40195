"""Registration with the kernel, the AutoTokenizer path, import cost, and errors for bad input."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from microformers.errors import ConfigError, FileMissingError, MicroformersError
from microformers_tokenizers import BatchEncoding, PreTrainedTokenizerFast


def test_plugin_registers_the_fast_backend() -> None:
    from microformers import registry

    reg = registry.get("tokenizers", "fast")
    assert reg is not None and reg.plugin == "tokenizers"
    assert reg.load() is PreTrainedTokenizerFast
    served = reg.meta["tokenizer_classes"]
    for name in ("PreTrainedTokenizerFast", "BertTokenizer", "GPT2TokenizerFast", "LlamaTokenizer", "Qwen2Tokenizer"):
        assert name in served
    assert not registry.plugins["tokenizers"].broken


def test_auto_tokenizer_uses_this_backend(
    minilm_dir: Path, make_bpe_dir: Any, reference: Any, sample: list[str]
) -> None:
    from microformers import AutoTokenizer

    for folder in (minilm_dir, make_bpe_dir("GPT2Tokenizer")):
        tok = AutoTokenizer.from_pretrained(str(folder))
        assert isinstance(tok, PreTrainedTokenizerFast)
        ref = reference.from_pretrained(str(folder))
        assert tok(sample[:10], padding=True) == dict(ref(sample[:10], padding=True))
        assert tok.name_or_path == str(folder)


def test_import_does_not_pull_torch_or_tokenizers() -> None:
    code = (
        "import sys, microformers_tokenizers, microformers_tokenizers.plugin; "
        "print('torch' in sys.modules, 'tokenizers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_encoding_without_tensors_does_not_import_torch(minilm_dir: Path) -> None:
    code = (
        "import sys; from microformers_tokenizers import PreTrainedTokenizerFast as T; "
        f"t = T.from_pretrained({str(minilm_dir)!r}); t(['a b', 'c'], padding=True, return_tensors='np'); "
        "t.apply_chat_template([{'role': 'user', 'content': 'x'}], chat_template='{{ messages[0].content }}'); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False"]


def test_batch_encoding_behaves_like_a_dict(minilm_dir: Path) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(minilm_dir)
    enc = tok(["hello world", "hola"], padding=True)
    assert isinstance(enc, dict) and enc.input_ids is enc["input_ids"]
    assert enc[0].ids == enc.input_ids[0]
    assert enc[:1] == {k: v[:1] for k, v in enc.items()}
    assert enc.n_sequences == 1
    with pytest.raises(AttributeError):
        _ = enc.not_a_key
    restored = pickle.loads(pickle.dumps(enc))
    assert restored == enc and restored.input_ids == enc.input_ids
    plain = BatchEncoding({"input_ids": [[1, 2], [3]]})
    with pytest.raises(ConfigError, match="padding=True"):
        plain.convert_to_tensors("pt")
    with pytest.raises(ConfigError, match="plain lists"):
        plain.word_ids()


def test_missing_folder_and_files(tmp_path: Path) -> None:
    with pytest.raises(FileMissingError, match="does not exist"):
        PreTrainedTokenizerFast.from_pretrained(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    assert not PreTrainedTokenizerFast.can_load(tmp_path / "empty")
    with pytest.raises(FileMissingError, match=r"tokenizer\.json"):
        PreTrainedTokenizerFast.from_pretrained(tmp_path / "empty")
    with pytest.raises(FileMissingError, match="from_files needs"):
        PreTrainedTokenizerFast.from_files({"tokenizer_config.json": {}})
    with pytest.raises(ConfigError, match="tokenizer_object"):
        PreTrainedTokenizerFast()


def test_malformed_files(tmp_path: Path, minilm_dir: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "tokenizer.json").write_text((minilm_dir / "tokenizer.json").read_text())
    (folder / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"tokenizer_config\.json is not valid JSON"):
        PreTrainedTokenizerFast.from_pretrained(folder)
    (folder / "tokenizer_config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        PreTrainedTokenizerFast.from_pretrained(folder)
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "Nope"}}')
    with pytest.raises(ConfigError, match="could not be read"):
        PreTrainedTokenizerFast.from_pretrained(folder)
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer"}')
    (folder / "tokenizer.json").write_text("{truncated")
    with pytest.raises(ConfigError, match=r"tokenizer\.json is not valid JSON"):
        PreTrainedTokenizerFast.from_pretrained(folder)
    (folder / "tokenizer_config.json").write_text('{"padding_side": "middle"}')
    (folder / "tokenizer.json").write_text((minilm_dir / "tokenizer.json").read_text())
    with pytest.raises(ConfigError, match="padding_side"):
        PreTrainedTokenizerFast.from_pretrained(folder)


def test_bad_call_arguments(minilm_dir: Path) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(minilm_dir)
    with pytest.raises(ConfigError, match="padding="):
        tok("x", padding="sideways")
    with pytest.raises(ConfigError, match="truncation="):
        tok("x", truncation="middle_out")
    with pytest.raises(ConfigError, match="return_tensors"):
        tok("x", return_tensors="tf")
    with pytest.raises(ConfigError, match="padding=True"):
        tok(["a", "b c d"], return_tensors="pt")
    with pytest.raises(ConfigError, match="text must be"):
        tok(12)
    with pytest.raises(ConfigError, match="text_pair"):
        tok(["a", "b"], ["c"])
    with pytest.raises(ConfigError, match="only_second"):
        tok("a b c", truncation="only_second", max_length=3)
    with pytest.raises(ConfigError, match="pad_to_multiple_of"):
        tok("a", padding=True, truncation=True, max_length=10, pad_to_multiple_of=8)
    with pytest.raises(ConfigError, match="unknown tokenizer argument"):
        tok("a", paddin=True)
    with pytest.raises(ConfigError, match="not a special token name"):
        tok.add_special_tokens({"pad": "[PAD]"})
    with pytest.raises(ConfigError, match="add_tokens"):
        tok.add_tokens([3])
    with pytest.raises(ConfigError, match="string or"):
        tok.pad_token = 5
    with pytest.raises(ConfigError, match="padding_side"):
        tok("a", padding=True, padding_side="up")


def test_save_failure_leaves_no_partial_files(minilm_dir: Path, tmp_path: Path) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(minilm_dir)
    tok.chat_template = "{{ messages }}"
    target = tmp_path / "out"
    original = tok._tokenizer
    tok._tokenizer = _Broken(original)
    with pytest.raises(RuntimeError, match="disk full"):
        tok.save_pretrained(target)
    assert not target.exists() or list(target.iterdir()) == []
    tok._tokenizer = original
    (target / "tokenizer.json").mkdir(parents=True)
    with pytest.raises(ConfigError, match="directory has that name"):
        tok.save_pretrained(target)
    assert sorted(p.name for p in target.iterdir()) == ["tokenizer.json"]
    with pytest.raises(ConfigError, match="is a file"):
        (tmp_path / "file").write_text("x")
        tok.save_pretrained(tmp_path / "file")


class _Broken:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def to_str(self, pretty: bool = False) -> str:
        raise RuntimeError("disk full")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_errors_are_microformers_errors() -> None:
    from microformers_tokenizers import ChatTemplateError

    assert issubclass(ChatTemplateError, MicroformersError)
    assert issubclass(ChatTemplateError, ConfigError)

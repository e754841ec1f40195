"""``CLIPTokenizerFast`` (also served as ``CLIPTokenizer``): CLIP's byte-level BPE over ``tokenizer.json``.

As the reference implementation does for this class, the vocabulary and merges are taken from ``tokenizer.json``
(or, in a folder saved by a slow tokenizer, from ``vocab.json`` and ``merges.txt``; ``CLIPTokenizer(vocab, merges)``
takes the same two as paths or in memory) and the rest of the pipeline is CLIP's own: NFC, whitespace runs to one space, lowercase; words split by CLIP's
pattern, then byte-level; BPE marking word ends with ``</w>``; ``<|startoftext|> text <|endoftext|>`` around each
text. Decoding turns the ``</w>`` marks back into spaces and strips the ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

from microformers.configuration import read_json
from microformers.errors import ConfigError, FileMissingError
from microformers_tokenizers import HUB_ARGUMENTS, PreTrainedTokenizerFast, bpe_vocab_and_merges, parse_merges_txt

__all__ = ["CLIPTokenizer", "CLIPTokenizerFast"]

# CLIP's word pattern (a fact of the tokenizer format): the two special tokens, English contractions, letter runs,
# single digits, runs of other non-space characters.
_WORDS = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
_END_OF_WORD = "</w>"
_VOCAB_FILE = "vocab.json"
_MERGES_FILE = "merges.txt"
_TOKENIZER_FILE = "tokenizer.json"
_MODEL_CONFIG_FILE = "config.json"
_SLOW_CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", _MODEL_CONFIG_FILE)
_CLIP_MODEL_TYPES = ("clip", "clip_text_model", "clip_vision_model")
_DEFAULT_TOKENS = {
    "unk_token": "<|endoftext|>",
    "bos_token": "<|startoftext|>",
    "eos_token": "<|endoftext|>",
    "pad_token": "<|endoftext|>",
}


def _clip_backend(backend: Tokenizer, unk_token: str) -> Tokenizer:
    """``backend``'s vocabulary, merges and added tokens under CLIP's normalizer, pre-tokenizer, model and decoder."""
    parsed = json.loads(backend.to_str())
    model = parsed.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ConfigError(
            f"a CLIP tokenizer.json needs a BPE model with a vocabulary, got model type {model.get('type')!r}; "
            "use the tokenizer.json saved with a CLIP checkpoint"
        )
    model.update(
        dropout=None,
        unk_token=unk_token,
        continuing_subword_prefix="",
        end_of_word_suffix=_END_OF_WORD,
        fuse_unk=False,
        byte_fallback=False,
    )
    rebuilt = Tokenizer.from_str(json.dumps(parsed))
    rebuilt.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    rebuilt.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_WORDS), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    rebuilt.decoder = decoders.ByteLevel()
    return rebuilt


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}); re-download or re-save the tokenizer") from exc


def _has_slow_files(folder: Path) -> bool:
    return folder.is_dir() and (folder / _VOCAB_FILE).is_file() and (folder / _MERGES_FILE).is_file()


def _is_clip_model_folder(folder: Path) -> bool:
    config = folder / _MODEL_CONFIG_FILE
    return config.is_file() and read_json(config, what=_MODEL_CONFIG_FILE).get("model_type") in _CLIP_MODEL_TYPES


def _bpe_backend(vocab: Any, merges: Any) -> Tokenizer:
    """A bare BPE over CLIP's vocabulary and merges (``_clip_backend`` adds the rest of CLIP's pipeline)."""
    token_ids, pairs = bpe_vocab_and_merges(vocab, merges)
    return Tokenizer(BPE(token_ids, pairs, end_of_word_suffix=_END_OF_WORD, fuse_unk=False, dropout=None))


class CLIPTokenizerFast(PreTrainedTokenizerFast):
    """CLIP's tokenizer (``<|startoftext|>``, ``<|endoftext|>`` also as unknown and padding token)."""

    def __init__(
        self,
        vocab: str | os.PathLike[str] | dict[str, int] | None = None,
        merges: str | os.PathLike[str] | list[Any] | None = None,
        tokenizer_object: Tokenizer | None = None,
        **kwargs: Any,
    ) -> None:
        for name, default in _DEFAULT_TOKENS.items():
            kwargs.setdefault(name, default)
        for classic, given in (("vocab_file", vocab), ("merges_file", merges)):
            if classic in kwargs:  # the slow tokenizer's spelling of the same argument
                if given is not None:
                    raise ConfigError(f"CLIPTokenizerFast: pass {classic.removesuffix('_file')} or {classic}, not both")
        vocab = kwargs.pop("vocab_file", vocab)
        merges = kwargs.pop("merges_file", merges)
        if vocab is not None or merges is not None:
            if tokenizer_object is not None or kwargs.get("tokenizer_file") is not None:
                raise ConfigError(
                    "CLIPTokenizerFast: pass either vocab/merges or tokenizer_object/tokenizer_file, not both"
                )
            if vocab is None or merges is None:
                raise ConfigError(
                    "CLIPTokenizerFast needs both vocab (vocab.json path or token -> id dict) and merges "
                    "(merges.txt path or list of merges)"
                )
            tokenizer_object = _bpe_backend(vocab, merges)
        if tokenizer_object is None and kwargs.get("tokenizer_file") is not None:
            tokenizer_object = Tokenizer.from_file(str(kwargs.pop("tokenizer_file")))
        if tokenizer_object is None:
            raise ConfigError(
                "CLIPTokenizerFast needs a tokenizer.json or vocab.json + merges.txt: use "
                "CLIPTokenizerFast.from_pretrained(folder) or pass vocab= and merges=, tokenizer_object= or "
                "tokenizer_file="
            )
        tokenizer_object = _clip_backend(tokenizer_object, str(kwargs["unk_token"]))
        super().__init__(tokenizer_object, **kwargs)
        bos, eos = str(self.bos_token), str(self.eos_token)
        bos_id, eos_id = self._tokenizer.token_to_id(bos), self._tokenizer.token_to_id(eos)
        if bos_id is None or eos_id is None:
            raise ConfigError(f"this CLIP tokenizer.json has no {bos if bos_id is None else eos} token")
        self._tokenizer.post_processor = processors.RobertaProcessing(
            (eos, eos_id), (bos, bos_id), trim_offsets=False, add_prefix_space=False
        )

    @classmethod
    def can_load(cls, path: str | os.PathLike[str]) -> bool:
        """A folder with ``tokenizer.json`` (or ``vocab.txt``), or the slow tokenizer's ``vocab.json`` + ``merges.txt``
        beside a CLIP ``config.json`` (GPT-2 and RoBERTa save the same two files: without a config naming CLIP, or a
        ``tokenizer_class`` that picks this class before this is asked, the folder is not claimed)."""
        return super().can_load(path) or (_has_slow_files(Path(path)) and _is_clip_model_folder(Path(path)))

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *init_inputs: Any, **kwargs: Any) -> Any:
        """A folder with ``tokenizer.json``, or one saved by the slow tokenizer (``vocab.json`` + ``merges.txt``)."""
        folder = Path(path)
        if not folder.is_dir() or (folder / _TOKENIZER_FILE).is_file() or not _has_slow_files(folder):
            return super().from_pretrained(path, *init_inputs, **kwargs)
        for ignored in HUB_ARGUMENTS:
            kwargs.pop(ignored, None)
        files: dict[str, Any] = {
            _VOCAB_FILE: _read_text(folder / _VOCAB_FILE),
            _MERGES_FILE: _read_text(folder / _MERGES_FILE),
        }
        for name in _SLOW_CONFIG_FILES:
            if (folder / name).is_file():
                files[name] = read_json(folder / name, what=name)
        kwargs.setdefault("name_or_path", str(path))
        return cls.from_files(files, *init_inputs, **kwargs)

    @classmethod
    def from_files(cls, files: Mapping[str, Any], *init_inputs: Any, **kwargs: Any) -> Any:
        """As ``PreTrainedTokenizerFast.from_files``; without a ``tokenizer.json``, ``"vocab.json"`` (JSON text or
        dict) and ``"merges.txt"`` (text) are the vocabulary and merges, as the slow tokenizer saves them."""
        if files.get(_TOKENIZER_FILE) is None and files.get(_VOCAB_FILE) is not None:
            where = kwargs.get("name_or_path") or "<in-memory files>"
            merges_text = files.get(_MERGES_FILE)
            if merges_text is None:
                raise FileMissingError(
                    f"{where}: {_VOCAB_FILE} without {_MERGES_FILE}; a CLIP tokenizer needs both (or a "
                    f"{_TOKENIZER_FILE}). Put merges.txt in the folder or save the tokenizer again."
                )
            vocab = files[_VOCAB_FILE]
            if isinstance(vocab, (str, bytes)):
                try:
                    vocab = json.loads(vocab)
                except json.JSONDecodeError as exc:
                    raise ConfigError(
                        f"{where}/{_VOCAB_FILE} is not valid JSON ({exc}); re-save the tokenizer"
                    ) from exc
            if isinstance(merges_text, bytes):
                merges_text = merges_text.decode("utf-8")
            if not isinstance(merges_text, str):
                raise ConfigError(
                    f"from_files: {_MERGES_FILE} must be the file's text, got {type(merges_text).__name__}"
                )
            backend = _bpe_backend(vocab, parse_merges_txt(merges_text))
            files = {
                **{k: v for k, v in files.items() if k not in (_VOCAB_FILE, _MERGES_FILE)},
                _TOKENIZER_FILE: backend.to_str(),
            }
        return super().from_files(files, *init_inputs, **kwargs)

    def update_post_processor(self) -> None:
        """CLIP always wraps texts in ``<|startoftext|> ... <|endoftext|>`` (set in ``__init__``)."""

    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> str | list[str]:
        text = super().decode(token_ids, skip_special_tokens, clean_up_tokenization_spaces, **kwargs)
        if isinstance(text, list):
            return [t.replace(_END_OF_WORD, " ").strip() for t in text]
        return text.replace(_END_OF_WORD, " ").strip()

    def _config_to_save(self) -> dict[str, Any]:
        config = super()._config_to_save()
        config["tokenizer_class"] = "CLIPTokenizer"
        return config


CLIPTokenizer = CLIPTokenizerFast

"""``Wav2Vec2CTCTokenizer``: a character vocabulary (``vocab.json``) and CTC decoding.

Encoding splits text into characters (a space becomes the word delimiter ``|``); multi-character
vocabulary entries such as ``<unk>`` are matched whole, swallowing the spaces around them. Decoding a
CTC output groups repeated ids, drops the blank (the pad token), turns ``|`` back into spaces and can
report each character's and word's frame offsets. Files and results equal the reference implementation's.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from microformers.errors import ConfigError, FileMissingError, InputError
from microformers_sdk.processing import BatchFeature

__all__ = ["Wav2Vec2CTCTokenizer", "Wav2Vec2CTCTokenizerOutput"]

VOCAB_FILE = "vocab.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


class Wav2Vec2CTCTokenizerOutput(dict):
    """``text`` plus ``char_offsets`` / ``word_offsets`` (lists of dicts with frame offsets), as keys or attributes.

    Like the reference's output, a field that was not asked for is absent from the keys and reads as ``None``.
    """

    _fields = ("text", "char_offsets", "word_offsets")

    def __init__(self, data: dict[str, Any] | None = None, **fields: Any) -> None:
        super().__init__({k: v for k, v in {**(data or {}), **fields}.items() if v is not None})

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return self[name]
        if name in self._fields:
            return None
        raise AttributeError(name)


def _token_text(value: Any) -> str | None:
    if isinstance(value, Mapping):
        return value.get("content")
    return value


class Wav2Vec2CTCTokenizer:
    """Character-level CTC tokenizer; the pad token is the CTC blank."""

    model_input_names = ["input_ids", "attention_mask"]
    padding_side = "right"

    def __init__(
        self,
        vocab_file: str | os.PathLike[str],
        bos_token: str = "<s>",
        eos_token: str = "</s>",
        unk_token: str = "<unk>",
        pad_token: str = "<pad>",
        word_delimiter_token: str = "|",
        replace_word_delimiter_char: str = " ",
        do_lower_case: bool = False,
        target_lang: str | None = None,
        **kwargs: Any,
    ) -> None:
        path = Path(vocab_file)
        try:
            vocab = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise FileMissingError(f"{path} not found: a Wav2Vec2CTCTokenizer needs its vocab.json") from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path} is not a valid JSON vocabulary ({exc}); re-save it as {{token: id}}") from exc
        if not isinstance(vocab, dict) or not vocab:
            raise ConfigError(f"{path} must hold a non-empty JSON object {{token: id}}")
        self.vocab: dict[str, Any] = vocab
        self.vocab_file = str(path)
        self.target_lang = target_lang
        self.encoder = self._select_vocab(target_lang, path)
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.bos_token = _token_text(bos_token)
        self.eos_token = _token_text(eos_token)
        self.unk_token = _token_text(unk_token)
        self.pad_token = _token_text(pad_token)
        self.word_delimiter_token = word_delimiter_token
        self.replace_word_delimiter_char = replace_word_delimiter_char
        self.do_lower_case = do_lower_case
        self.clean_up_tokenization_spaces = bool(kwargs.pop("clean_up_tokenization_spaces", False))
        self.model_max_length = kwargs.pop("model_max_length", int(1e30))
        self.padding_side = kwargs.pop("padding_side", "right")
        self.processor_class = kwargs.pop("processor_class", None)
        self.additional_special_tokens = [
            t for t in map(_token_text, kwargs.pop("additional_special_tokens", None) or []) if t
        ]
        self.name_or_path = str(kwargs.pop("name_or_path", path.parent))
        self._added_tokens: dict[str, int] = {}
        for token in _added_tokens_from_config(kwargs.pop("added_tokens_decoder", None)):
            if token not in self.encoder:
                self._added_tokens[token] = self._next_id()
        for key in ("tokenizer_class", "backend", "auto_map", "special_tokens_pattern", "extra_special_tokens"):
            kwargs.pop(key, None)
        self.init_kwargs = dict(kwargs)
        if self.pad_token is None or self.pad_token not in self.encoder:
            raise ConfigError(
                f"{path}: the pad token {self.pad_token!r} (the CTC blank) is not in the vocabulary. Add it to "
                f'vocab.json (e.g. "{self.pad_token or "<pad>"}": 0) or pass pad_token=<a token of the vocabulary>'
            )
        self._rebuild_splitter()

    def _select_vocab(self, target_lang: str | None, path: Path) -> dict[str, int]:
        nested = all(isinstance(v, dict) for v in self.vocab.values())
        if target_lang is not None:
            if not nested or target_lang not in self.vocab:
                raise ConfigError(
                    f"target_lang={target_lang!r} is not a language of {path}"
                    + (f"; choose one of {', '.join(sorted(self.vocab))}" if nested else " (not a multi-lingual vocab)")
                )
            return dict(self.vocab[target_lang])
        if nested:
            raise ConfigError(
                f"{path} holds one vocabulary per language; pass target_lang=<one of {sorted(self.vocab)}>"
            )
        bad = [k for k, v in self.vocab.items() if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise ConfigError(f"{path}: ids must be integers; {bad[:3]} are not")
        return dict(self.vocab)

    def _next_id(self) -> int:
        return max([*self.encoder.values(), *self._added_tokens.values()], default=-1) + 1

    def _rebuild_splitter(self) -> None:
        multi = sorted({t for t in [*self.encoder, *self._added_tokens] if len(t) > 1}, key=len, reverse=True)
        self._multi_tokens = set(multi)
        self._splitter = re.compile(
            "(" + "|".join(rf"\s*{re.escape(t)}\s*" for t in multi) + ")" if multi else r"(?!x)x"
        )

    # -- vocabulary ---------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.decoder)

    def __len__(self) -> int:
        return len(self.encoder) + len(self._added_tokens)

    def get_vocab(self) -> dict[str, int]:
        return {**self.encoder, **self._added_tokens}

    def add_tokens(self, new_tokens: str | Iterable[str], special_tokens: bool = False) -> int:
        """Add tokens (matched whole when encoding); returns how many were new."""
        tokens = [new_tokens] if isinstance(new_tokens, str) else list(new_tokens)
        added = 0
        for token in map(_token_text, tokens):
            if token and token not in self.encoder and token not in self._added_tokens:
                self._added_tokens[token] = self._next_id()
                added += 1
                if special_tokens:
                    self.additional_special_tokens.append(token)
        self._rebuild_splitter()
        return added

    @property
    def all_special_tokens(self) -> list[str]:
        tokens = [getattr(self, n) for n in _SPECIAL_NAMES if getattr(self, n)]
        return list(dict.fromkeys([*tokens, *self.additional_special_tokens]))

    @property
    def all_special_ids(self) -> list[int]:
        return [self.convert_tokens_to_ids(t) for t in self.all_special_tokens]

    def _id_of(self, token: str | None) -> int | None:
        if token is None:
            return None
        return self.get_vocab().get(token)

    @property
    def pad_token_id(self) -> int | None:
        return self._id_of(self.pad_token)

    @property
    def unk_token_id(self) -> int | None:
        return self._id_of(self.unk_token)

    @property
    def bos_token_id(self) -> int | None:
        return self._id_of(self.bos_token)

    @property
    def eos_token_id(self) -> int | None:
        return self._id_of(self.eos_token)

    @property
    def word_delimiter_token_id(self) -> int | None:
        return self._id_of(self.word_delimiter_token)

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        if isinstance(tokens, str):
            vocab = self.get_vocab()
            found = vocab.get(tokens, vocab.get(self.unk_token) if self.unk_token else None)
            if found is None:
                raise InputError(f"token {tokens!r} is not in the vocabulary and there is no unk token")
            return found
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> str | list[str]:
        added = {v: k for k, v in self._added_tokens.items()}
        if isinstance(ids, (int, np.integer)):
            return self.decoder.get(int(ids), added.get(int(ids), self.unk_token))
        special = set(self.all_special_ids) if skip_special_tokens else set()
        tokens = []
        for index in _as_id_list(ids):
            if index in special:
                continue
            tokens.append(self.decoder.get(index, added.get(index, self.unk_token)))
        return tokens

    # -- encoding -----------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[str]:
        """Characters, with ``|`` for spaces; multi-character vocabulary entries stay whole."""
        tokens: list[str] = []
        for piece in self._splitter.split(text):
            if not piece:
                continue
            if piece.strip() in self._multi_tokens:
                tokens.append(piece.strip())
            else:
                tokens.extend((piece.upper() if self.do_lower_case else piece).replace(" ", self.word_delimiter_token))
        return tokens

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        if kwargs.pop("add_special_tokens", True) is False:
            pass  # this tokenizer adds no special tokens either way
        if kwargs:
            raise InputError(f"encode() got unexpected arguments {sorted(kwargs)}")
        return self.convert_tokens_to_ids(self.tokenize(text))

    def __call__(
        self,
        text: str | list[str] | None = None,
        padding: bool | str = False,
        truncation: bool = False,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        return_tensors: str | None = None,
        return_attention_mask: bool | None = None,
        add_special_tokens: bool = True,
        is_split_into_words: bool = False,
        return_length: bool = False,
    ) -> BatchFeature:
        """``{"input_ids", "attention_mask"}`` for one text or a list of texts (the guide's label encoding)."""
        if text is None:
            raise InputError("Wav2Vec2CTCTokenizer() needs text=... (a string or a list of strings)")
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        if not all(isinstance(t, str) for t in texts):
            raise InputError("Wav2Vec2CTCTokenizer() takes a string or a list of strings")
        if is_split_into_words:
            texts = [" " + t for t in texts]
        ids = [self.encode(t) for t in texts]
        if truncation:
            if max_length is None:
                raise InputError("truncation=True needs max_length=...")
            ids = [row[:max_length] for row in ids]
        encoded: dict[str, Any] = {"input_ids": ids}
        if return_attention_mask is not False:
            encoded["attention_mask"] = [[1] * len(row) for row in ids]
        if return_length:
            encoded["length"] = [len(row) for row in ids]
        if padding not in (False, None, "do_not_pad"):
            encoded = dict(
                self.pad(encoded, padding=padding, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of)
            )
        if single:
            encoded = {k: v[0] for k, v in encoded.items()}
        return BatchFeature(encoded, tensor_type=return_tensors)

    def pad(
        self,
        encoded_inputs: Any,
        padding: bool | str = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | None = None,
    ) -> BatchFeature:
        """Pad ``input_ids`` with the pad id (and ``attention_mask`` with 0) to the longest row or ``max_length``."""
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
            encoded_inputs = {k: [row[k] for row in encoded_inputs] for k in encoded_inputs[0]}
        if not isinstance(encoded_inputs, Mapping) or "input_ids" not in encoded_inputs:
            raise InputError("tokenizer.pad() takes {'input_ids': [...]} or a list of such dicts")
        rows = [_as_id_list(r) for r in encoded_inputs["input_ids"]]
        masks = encoded_inputs.get("attention_mask")
        masks = [_as_id_list(m) for m in masks] if masks is not None else [[1] * len(r) for r in rows]
        if padding in (False, None, "do_not_pad"):
            width = None
        elif padding in (True, "longest"):
            width = max((len(r) for r in rows), default=0)
        elif padding == "max_length":
            if max_length is None:
                raise InputError("padding='max_length' needs max_length=...")
            width = max_length
        else:
            raise InputError(f"padding={padding!r}: use True/'longest', 'max_length' or False")
        if width is not None and pad_to_multiple_of and width % pad_to_multiple_of:
            width = (width // pad_to_multiple_of + 1) * pad_to_multiple_of
        if width is not None:
            pad_id = self.pad_token_id
            extra = [max(0, width - len(r)) for r in rows]
            if self.padding_side == "left":
                rows = [[pad_id] * n + r for r, n in zip(rows, extra)]
                masks = [[0] * n + m for m, n in zip(masks, extra)]
            else:
                rows = [r + [pad_id] * n for r, n in zip(rows, extra)]
                masks = [m + [0] * n for m, n in zip(masks, extra)]
        out: dict[str, Any] = {"input_ids": rows}
        if return_attention_mask is not False:
            out["attention_mask"] = masks
        return BatchFeature(out, tensor_type=return_tensors)

    # -- decoding -----------------------------------------------------------------------------------
    def convert_tokens_to_string(
        self,
        tokens: list[str],
        group_tokens: bool = True,
        spaces_between_special_tokens: bool = False,
        output_char_offsets: bool = False,
        output_word_offsets: bool = False,
    ) -> dict[str, Any]:
        """CTC collapse: group repeats, drop blanks, delimiter -> space; optional frame offsets."""
        if not tokens:
            return {"text": "", "char_offsets": [], "word_offsets": []}
        if group_tokens:
            groups = [(token, len(list(run))) for token, run in itertools.groupby(tokens)]
        else:
            groups = [(token, 1) for token in tokens]
        chars = [
            self.replace_word_delimiter_char if t == self.word_delimiter_token else t
            for t, _ in groups
            if t != self.pad_token
        ]
        char_offsets = word_offsets = None
        if output_char_offsets or output_word_offsets:
            char_offsets = []
            end = 0
            for token, repeats in groups:
                start, end = end, end + repeats
                if token != self.pad_token:
                    char_offsets.append({"char": None, "start_offset": start, "end_offset": end})
            for offset, char in zip(char_offsets, chars):
                offset["char"] = char
            if output_word_offsets:
                word_offsets = self._get_word_offsets(char_offsets, self.replace_word_delimiter_char)
            if not output_char_offsets:
                char_offsets = None
        text = (" " if spaces_between_special_tokens else "").join(chars).strip()
        if self.do_lower_case:
            text = text.lower()
        return {"text": text, "char_offsets": char_offsets, "word_offsets": word_offsets}

    @staticmethod
    def _get_word_offsets(offsets: list[dict[str, Any]], word_delimiter_char: str = " ") -> list[dict[str, Any]]:
        """Merge consecutive non-delimiter characters into words with the first start and last end offset."""
        words: list[dict[str, Any]] = []
        current: dict[str, Any] | None = None
        for offset in offsets:
            if offset["char"] == word_delimiter_char:
                if current is not None:
                    words.append(current)
                    current = None
            elif current is None:
                current = {
                    "word": offset["char"],
                    "start_offset": offset["start_offset"],
                    "end_offset": offset["end_offset"],
                }
            else:
                current["word"] += offset["char"]
                current["end_offset"] = offset["end_offset"]
        if current is not None:
            words.append(current)
        return words

    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        output_char_offsets: bool = False,
        output_word_offsets: bool = False,
        group_tokens: bool = True,
        spaces_between_special_tokens: bool = False,
    ) -> str | Wav2Vec2CTCTokenizerOutput:
        """Text of one CTC output (``argmax`` ids per frame); with offsets, a :class:`Wav2Vec2CTCTokenizerOutput`."""
        tokens = self.convert_ids_to_tokens(_as_id_list(token_ids))
        if skip_special_tokens:
            special = set(self.all_special_tokens) - {self.word_delimiter_token}
            tokens = [t for t in tokens if t not in special]
        result = self.convert_tokens_to_string(
            tokens,
            group_tokens=group_tokens,
            spaces_between_special_tokens=spaces_between_special_tokens,
            output_char_offsets=output_char_offsets,
            output_word_offsets=output_word_offsets,
        )
        text = result["text"]
        clean = (
            self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        if clean:
            text = _clean_up_spaces(text)
        if output_char_offsets or output_word_offsets:
            return Wav2Vec2CTCTokenizerOutput(
                text=text, char_offsets=result["char_offsets"], word_offsets=result["word_offsets"]
            )
        return text

    def batch_decode(self, sequences: Any, **kwargs: Any) -> list[str] | Wav2Vec2CTCTokenizerOutput:
        """:meth:`decode` for each row; with offsets, one output whose keys hold per-row lists."""
        if hasattr(sequences, "detach"):
            sequences = sequences.detach().cpu().tolist()
        elif isinstance(sequences, np.ndarray):
            sequences = sequences.tolist()
        decoded = [self.decode(row, **kwargs) for row in sequences]
        if kwargs.get("output_char_offsets") or kwargs.get("output_word_offsets"):
            return Wav2Vec2CTCTokenizerOutput({k: [d[k] for d in decoded] for k in decoded[0]})
        return decoded

    # -- files --------------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        vocab = self.get_vocab()
        added = {
            str(vocab[t]): {
                "content": t,
                "lstrip": True,
                "normalized": False,
                "rstrip": True,
                "single_word": False,
                "special": t in self.additional_special_tokens,
            }
            for t in sorted(self._multi_tokens, key=lambda t: vocab[t])
        }
        config: dict[str, Any] = {
            "added_tokens_decoder": added,
            "bos_token": self.bos_token,
            "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
            "do_lower_case": self.do_lower_case,
            "eos_token": self.eos_token,
            "model_max_length": self.model_max_length,
            "pad_token": self.pad_token,
            "replace_word_delimiter_char": self.replace_word_delimiter_char,
            "target_lang": self.target_lang,
            "tokenizer_class": "Wav2Vec2CTCTokenizer",
            "unk_token": self.unk_token,
            "word_delimiter_token": self.word_delimiter_token,
            **self.init_kwargs,
        }
        if self.additional_special_tokens:
            config["additional_special_tokens"] = list(self.additional_special_tokens)
        if self.processor_class:
            config["processor_class"] = self.processor_class
        return config

    def save_pretrained(self, save_directory: str | os.PathLike[str], **kwargs: Any) -> tuple[str, ...]:
        """Write ``vocab.json`` and ``tokenizer_config.json`` into the folder (atomically)."""
        from microformers.hub import staged_folder

        if kwargs.pop("push_to_hub", False):
            raise ConfigError("push_to_hub is not supported by microformers; upload the folder with huggingface_hub")
        kwargs.pop("legacy_format", None)
        if kwargs:
            raise ConfigError(f"Wav2Vec2CTCTokenizer.save_pretrained() got unexpected arguments {sorted(kwargs)}")
        target = Path(save_directory)
        if target.is_file():
            raise ConfigError(f"save_pretrained: {target} is a file; pass a folder")
        with staged_folder(target) as staging:
            (staging / VOCAB_FILE).write_text(
                json.dumps(self.vocab, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            (staging / CONFIG_FILE).write_text(
                json.dumps(self._config(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
        return (str(target / VOCAB_FILE), str(target / CONFIG_FILE))

    @classmethod
    def can_load(cls, folder: Path) -> bool:
        """Claimed only through ``tokenizer_class``; never guessed for other folders."""
        return False

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *inputs: Any, **kwargs: Any) -> Wav2Vec2CTCTokenizer:
        """Load ``vocab.json`` + ``tokenizer_config.json`` (+ ``special_tokens_map.json``) from a folder."""
        from microformers.configuration import read_json
        from microformers.hub import resolve_file, split_hub_kwargs

        if inputs:
            raise ConfigError("Wav2Vec2CTCTokenizer.from_pretrained takes its options as keywords")
        hub_kwargs, rest = split_hub_kwargs(kwargs)
        rest.pop("trust_remote_code", None)
        rest.pop("use_fast", None)
        vocab_path = resolve_file(path, VOCAB_FILE, **hub_kwargs)
        settings: dict[str, Any] = {}
        for name in (SPECIAL_TOKENS_FILE, CONFIG_FILE):
            found = resolve_file(path, name, required=False, **hub_kwargs)
            if found is not None:
                settings.update(read_json(found, what="tokenizer configuration"))
        settings.update(rest)
        settings.setdefault("name_or_path", str(path))
        for key in _SPECIAL_NAMES:
            if key in settings:
                settings[key] = _token_text(settings[key])
        return cls(vocab_path, **settings)


def _added_tokens_from_config(added: Any) -> list[str]:
    if not isinstance(added, Mapping):
        return []
    pairs = sorted(((int(k), _token_text(v)) for k, v in added.items()), key=lambda kv: kv[0])
    return [t for _, t in pairs if t]


def _as_id_list(ids: Any) -> list[int]:
    if hasattr(ids, "detach"):
        ids = ids.detach().cpu()
        if ids.dim() > 1:
            raise InputError(f"decode() takes one sequence of ids; got shape {tuple(ids.shape)} (use batch_decode)")
        return [int(i) for i in ids.tolist()]
    if isinstance(ids, np.ndarray):
        if ids.ndim > 1:
            raise InputError(f"decode() takes one sequence of ids; got shape {ids.shape} (use batch_decode)")
        return [int(i) for i in ids.tolist()]
    if isinstance(ids, (int, np.integer)):
        return [int(ids)]
    return [int(i) for i in ids]


def _clean_up_spaces(text: str) -> str:
    for before, after in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(before, after)
    return text

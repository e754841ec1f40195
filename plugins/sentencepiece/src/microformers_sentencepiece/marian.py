"""``MarianTokenizer``: ``source.spm`` / ``target.spm`` pieces, ids from ``vocab.json``, ``</s>`` appended.

As in the reference, this tokenizer runs SentencePiece itself (no ``tokenizers`` conversion): text is split
on the special tokens, each part is encoded into pieces by the source (or, for ``text_target=``, the target)
SentencePiece model, and pieces map to ids through ``vocab.json`` (``target_vocab.json`` for targets when
``separate_vocabs``), unknown pieces to ``<unk>``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from microformers.configuration import refuse_push_to_hub
from microformers.errors import ConfigError, FileMissingError
from microformers_tokenizers import HUB_ARGUMENTS, BatchEncoding

from . import _files
from .spm_model import load_processor

SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
VOCAB, TARGET_VOCAB = "vocab.json", "target_vocab.json"
SPIECE_UNDERLINE = "▁"
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_NOT_SAVED = ("name_or_path", "tokenizer_class", "added_tokens_decoder", "sp_model_kwargs", "target_vocab_file")


def _vocab(files: Mapping[str, Any], name: str, where: str) -> dict[str, int]:
    value = files.get(name)
    if value is None:
        raise FileMissingError(
            f"{where}/{name} is missing: MarianTokenizer maps SentencePiece pieces to ids with it. Put the "
            f"{name} of the model in the folder, or save the tokenizer again with save_pretrained."
        )
    vocab = _files.json_dict(files, name)
    if not all(isinstance(v, int) for v in vocab.values()):
        raise ConfigError(f"{where}/{name} must map each piece to an integer id; re-download it.")
    return vocab


class MarianTokenizer:
    """The Marian (OPUS-MT) tokenizer with the Transformers tokenizer API."""

    model_input_names: list[str] = ["input_ids", "attention_mask"]
    padding_side = "right"
    truncation_side = "right"
    is_fast = False

    def __init__(
        self,
        *,
        source_spm: bytes,
        target_spm: bytes,
        vocab: dict[str, int],
        target_vocab: dict[str, int] | None = None,
        separate_vocabs: bool = False,
        source_lang: str | None = None,
        target_lang: str | None = None,
        unk_token: str = "<unk>",
        eos_token: str = "</s>",
        pad_token: str = "<pad>",
        model_max_length: int = 512,
        name_or_path: str = "",
        **kwargs: Any,
    ) -> None:
        where = name_or_path or "<in-memory files>"
        self.encoder = dict(vocab)
        if str(unk_token) not in self.encoder:
            raise ConfigError(f"{where}/{VOCAB} has no {unk_token!r} (the unk_token); re-download the vocabulary.")
        self.separate_vocabs = bool(separate_vocabs)
        if self.separate_vocabs:
            if target_vocab is None:
                raise FileMissingError(
                    f"{where}/{TARGET_VOCAB} is missing but tokenizer_config.json sets separate_vocabs=true; add "
                    "the target vocabulary or set separate_vocabs to false."
                )
            self.target_encoder = dict(target_vocab)
            self.decoder = {v: k for k, v in self.target_encoder.items()}
            self.supported_language_codes: list[str] = []
        else:
            self.decoder = {v: k for k, v in self.encoder.items()}
            self.supported_language_codes = [k for k in self.encoder if k.startswith(">>") and k.endswith("<<")]
        self._spm_bytes = (source_spm, target_spm)
        self.spm_source = load_processor(source_spm, f"{where}/{SOURCE_SPM}")
        self.spm_target = load_processor(target_spm, f"{where}/{TARGET_SPM}")
        self.source_lang, self.target_lang = source_lang, target_lang
        self.name_or_path = name_or_path
        self.model_max_length = int(model_max_length)
        self.unk_token, self.eos_token, self.pad_token = str(unk_token), str(eos_token), str(pad_token)
        self.bos_token = self.sep_token = self.cls_token = self.mask_token = None
        extra = kwargs.pop("additional_special_tokens", None) or kwargs.pop("extra_special_tokens", None) or []
        self.extra_special_tokens: list[str] = [str(t) for t in extra]
        self.clean_up_tokenization_spaces = bool(kwargs.pop("clean_up_tokenization_spaces", False))
        self.padding_side = kwargs.pop("padding_side", "right")
        self.truncation_side = kwargs.pop("truncation_side", "right")
        self.init_kwargs: dict[str, Any] = {
            "source_lang": source_lang,
            "target_lang": target_lang,
            "separate_vocabs": self.separate_vocabs,
            **kwargs,
        }
        self._target_mode = False

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def can_load(cls, path: str | os.PathLike[str]) -> bool:
        return _files.can_load(path)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *init_inputs: Any, **kwargs: Any) -> MarianTokenizer:
        """Load ``source.spm``, ``target.spm``, ``vocab.json`` (and ``target_vocab.json``) from a local folder."""
        for ignored in HUB_ARGUMENTS:
            kwargs.pop(ignored, None)
        files = _files.read_folder(path, [SOURCE_SPM, TARGET_SPM])
        kwargs.setdefault("name_or_path", str(path))
        return cls.from_files(files, *init_inputs, **kwargs)

    @classmethod
    def from_files(cls, files: Mapping[str, Any], *init_inputs: Any, **kwargs: Any) -> MarianTokenizer:
        """``files``: ``source.spm`` / ``target.spm`` as bytes, ``vocab.json`` (``target_vocab.json``) and
        ``tokenizer_config.json`` as dicts or JSON text."""
        where = str(kwargs.get("name_or_path") or "<in-memory files>")
        config = _files.merged_config(files, kwargs)
        for name in (SOURCE_SPM, TARGET_SPM):
            if not isinstance(files.get(name), bytes | bytearray):
                raise FileMissingError(
                    f"{where}/{name} is missing: MarianTokenizer needs both SentencePiece models ({SOURCE_SPM}, "
                    f"{TARGET_SPM}). Put them in the folder (they come with the model's tokenizer files)."
                )
        vocab = _vocab(files, VOCAB, where)
        target = _vocab(files, TARGET_VOCAB, where) if TARGET_VOCAB in files else None
        for key in ("vocab", "source_spm", "target_spm", "target_vocab_file"):
            config.pop(key, None)
        return cls(
            source_spm=bytes(files[SOURCE_SPM]),
            target_spm=bytes(files[TARGET_SPM]),
            vocab=vocab,
            target_vocab=target,
            **config,
        )

    # -- vocabulary ---------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.encoder)

    def __len__(self) -> int:
        return len(self.encoder)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.encoder)

    def get_src_vocab(self) -> dict[str, int]:
        return dict(self.encoder)

    def get_tgt_vocab(self) -> dict[str, int]:
        return dict(self.target_encoder if self.separate_vocabs else self.encoder)

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {n: getattr(self, n) for n in _SPECIAL_NAMES if getattr(self, n) is not None}

    @property
    def all_special_tokens(self) -> list[str]:
        seen: dict[str, None] = {}
        for token in [*self.special_tokens_map.values(), *self.extra_special_tokens]:
            seen.setdefault(token)
        return list(seen)

    @property
    def all_special_ids(self) -> list[int]:
        return [self._token_to_id(t, self.encoder) for t in self.all_special_tokens]

    def _token_to_id(self, token: str, encoder: Mapping[str, int]) -> int:
        return encoder[token] if token in encoder else encoder[self.unk_token] if self.unk_token in encoder else 0

    @property
    def _encoder(self) -> dict[str, int]:
        return self.target_encoder if self._target_mode and self.separate_vocabs else self.encoder

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Pieces map through the vocabulary in use (the target one while encoding ``text_target`` with
        ``separate_vocabs``), special tokens through the source vocabulary."""
        if not isinstance(tokens, str):
            return [self.convert_tokens_to_ids(t) for t in tokens]
        return self._token_to_id(tokens, self.encoder if tokens in self.all_special_tokens else self._encoder)

    def _id_to_token(self, index: int, use_source: bool) -> str:
        for token in self.all_special_tokens:
            if self.encoder.get(token) == index:
                return token
        if index in self.decoder:
            return self.decoder[index]
        processor = self.spm_source if use_source else self.spm_target
        piece = processor.IdToPiece(index) if 0 <= index < processor.GetPieceSize() else ""
        return piece or self.unk_token

    def convert_ids_to_tokens(self, ids: int | Sequence[int], skip_special_tokens: bool = False) -> str | list[str]:
        use_source = not self.separate_vocabs
        if isinstance(ids, int):
            return self._id_to_token(ids, use_source)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._id_to_token(int(i), use_source) for i in _python(ids) if int(i) not in skip]

    # Special tokens keep their source-vocabulary ids, also in targets (the reference's added tokens).
    eos_token_id = property(lambda self: self._token_to_id(self.eos_token, self.encoder))
    pad_token_id = property(lambda self: self._token_to_id(self.pad_token, self.encoder))
    unk_token_id = property(lambda self: self._token_to_id(self.unk_token, self.encoder))
    bos_token_id = sep_token_id = cls_token_id = mask_token_id = property(lambda self: None)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 1

    # -- encoding -----------------------------------------------------------------------------
    def remove_language_code(self, text: str) -> tuple[list[str], str]:
        """A leading ``>>xx<<`` target-language code, kept whole, and the rest of the text."""
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            return [text[: end + 2]], text[end + 2 :]
        return [], text

    def _split_special(self, text: str) -> list[str]:
        specials = sorted(set(self.all_special_tokens), key=len, reverse=True)
        if not specials:
            return [text]
        return [part for part in re.split("(" + "|".join(map(re.escape, specials)) + ")", text) if part]

    def tokenize(self, text: str, **kwargs: Any) -> list[str]:
        """The pieces of ``text`` (special tokens kept whole), with the current (source or target) model."""
        processor = self.spm_target if self._target_mode else self.spm_source
        specials = set(self.all_special_tokens)
        tokens: list[str] = []
        for part in self._split_special(text):
            if part in specials:
                tokens.append(part)
            else:
                code, rest = self.remove_language_code(part)
                tokens.extend(code + processor.encode(rest, out_type=str))
        return tokens

    def _ids(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ConfigError(f"MarianTokenizer takes text as str (or a list of str), got {type(text).__name__}")
        return self.convert_tokens_to_ids(self.tokenize(text))

    def __call__(
        self,
        text: str | Sequence[str] | None = None,
        text_pair: str | Sequence[str] | None = None,
        text_target: str | Sequence[str] | None = None,
        text_pair_target: str | Sequence[str] | None = None,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_attention_mask: bool | None = None,
        max_target_length: int | None = None,
        **kwargs: Any,
    ) -> BatchEncoding:
        """Tokenize source text and/or targets (``text_target=``, with the target model and vocabulary)."""
        unknown = set(kwargs) - {"verbose", "return_token_type_ids", "return_length", "stride"}
        if unknown:
            raise ConfigError(f"MarianTokenizer: unsupported argument(s) {sorted(unknown)}")
        if text is None and text_target is None:
            raise ConfigError("pass text (or text_target) to the tokenizer")
        options = {
            "add_special_tokens": add_special_tokens,
            "padding": padding,
            "truncation": truncation,
            "pad_to_multiple_of": pad_to_multiple_of,
            "padding_side": padding_side,
            "return_tensors": return_tensors,
            "return_attention_mask": return_attention_mask,
        }
        encodings = self._encode(text, text_pair, max_length=max_length, **options) if text is not None else None
        if text_target is None:
            return encodings
        self._target_mode = True
        try:
            target_length = max_target_length if max_target_length is not None else max_length
            targets = self._encode(text_target, text_pair_target, max_length=target_length, **options)
        finally:
            self._target_mode = False
        if encodings is None:
            return targets
        encodings["labels"] = targets["input_ids"]
        return encodings

    def _encode(
        self,
        text: Any,
        text_pair: Any,
        *,
        add_special_tokens: bool,
        padding: bool | str,
        truncation: bool | str | None,
        max_length: int | None,
        pad_to_multiple_of: int | None,
        padding_side: str | None,
        return_tensors: str | None,
        return_attention_mask: bool | None,
    ) -> BatchEncoding:
        batched = isinstance(text, list | tuple)
        texts = list(text) if batched else [text]
        pairs = (list(text_pair) if batched else [text_pair]) if text_pair is not None else [None] * len(texts)
        if len(pairs) != len(texts):
            raise ConfigError(f"text has {len(texts)} items but text_pair has {len(pairs)}; give one pair per text")
        if max_length is not None and truncation is None and padding in (False, None, "do_not_pad"):
            truncation = True
        if truncation in (True, "longest_first", "only_first", "only_second") and max_length is None:
            max_length = self.model_max_length
        rows: list[list[int]] = []
        for first, second in zip(texts, pairs):
            a, b = self._ids(first), (self._ids(second) if second is not None else None)
            if truncation not in (None, False, "do_not_truncate") and max_length is not None:
                a, b = self._truncate(a, b, max_length - (1 if add_special_tokens else 0), str(truncation))
            ids = a + (b or [])
            rows.append([*ids, self.eos_token_id] if add_special_tokens else ids)
        data: dict[str, Any] = {"input_ids": rows}
        if return_attention_mask is not False:
            data["attention_mask"] = [[1] * len(r) for r in rows]
        target = self._pad_length(rows, padding, max_length, pad_to_multiple_of)
        if target is not None:
            side = padding_side or self.padding_side
            for key, fill in (("input_ids", self.pad_token_id), ("attention_mask", 0)):
                if key in data:
                    data[key] = [_pad(r, target, fill, side) for r in data[key]]
        if not batched and return_tensors is None:
            data = {k: v[0] for k, v in data.items()}
        return BatchEncoding(data, tensor_type=return_tensors, prepend_batch_axis=not batched)

    def _truncate(
        self, a: list[int], b: list[int] | None, room: int, strategy: str
    ) -> tuple[list[int], list[int] | None]:
        cut = (lambda ids, n: ids[:n]) if self.truncation_side == "right" else (lambda ids, n: ids[len(ids) - n :])
        room = max(room, 0)
        if b is None or strategy == "only_first":
            return cut(a, max(room - len(b or []), 0)), b
        if strategy == "only_second":
            return a, cut(b, max(room - len(a), 0))
        while len(a) + len(b) > room:
            if len(a) > len(b):
                a = cut(a, len(a) - 1)
            else:
                b = cut(b, len(b) - 1)
        return a, b

    def _pad_length(
        self, rows: list[list[int]], padding: Any, max_length: int | None, multiple: int | None
    ) -> int | None:
        padding = getattr(padding, "value", padding)
        if padding in (False, None, "do_not_pad"):
            return None
        if padding in (True, "longest"):
            length = max((len(r) for r in rows), default=0)
        elif padding == "max_length":
            length = max_length if max_length is not None else self.model_max_length
        else:
            raise ConfigError(f"padding={padding!r} is not valid: use True/'longest', 'max_length', or False")
        if multiple and length % multiple:
            length = (length // multiple + 1) * multiple
        return length

    def encode(self, text: str, text_pair: str | None = None, add_special_tokens: bool = True, **kwargs: Any) -> Any:
        return self(text, text_pair=text_pair, add_special_tokens=add_special_tokens, **kwargs)["input_ids"]

    def build_inputs_with_special_tokens(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        return token_ids_0 + (token_ids_1 or []) + [self.eos_token_id]

    def get_special_tokens_mask(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None, already_has_special_tokens: bool = False
    ) -> list[int]:
        """1 for ``</s>`` and ``<pad>`` (the special tokens Marian adds), 0 otherwise."""
        special = {self.eos_token_id, self.pad_token_id}
        mask = [1 if i in special else 0 for i in token_ids_0 + (token_ids_1 or [])]
        return mask if already_has_special_tokens else [*mask, 1]

    def as_target_tokenizer(self) -> Any:
        raise ConfigError(
            "MarianTokenizer.as_target_tokenizer() was removed from the Transformers API; tokenize targets with "
            "tokenizer(text, text_target=labels) (or tokenizer(text_target=labels)) instead."
        )

    # -- decoding -----------------------------------------------------------------------------
    def convert_tokens_to_string(self, tokens: list[str], use_source: bool | None = None) -> str:
        processor = (
            self.spm_source if (not self.separate_vocabs if use_source is None else use_source) else self.spm_target
        )
        specials = set(self.all_special_tokens)
        out, pending = "", []
        for token in tokens:
            if token in specials:
                out += processor.decode_pieces(pending) + token + " "
                pending = []
            else:
                pending.append(token)
        out += processor.decode_pieces(pending)
        return out.replace(SPIECE_UNDERLINE, " ").strip()

    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        use_source_tokenizer: bool | None = None,
        **kwargs: Any,
    ) -> str:
        """Ids to text with the target model (the source one when the vocabulary is shared, or when asked)."""
        ids = _python(token_ids)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        ids = [ids] if isinstance(ids, int) else ids
        use_source = (not self.separate_vocabs) if use_source_tokenizer is None else use_source_tokenizer
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        tokens = [self._id_to_token(int(i), use_source) for i in ids if int(i) not in skip]
        text = self.convert_tokens_to_string(tokens, use_source)
        clean = (
            self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        if clean:
            for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't")):
                text = text.replace(before, after)
            for before, after in ((" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
                text = text.replace(before, after)
        return text

    def batch_decode(self, sequences: Any, **kwargs: Any) -> list[str]:
        return [self.decode(seq, **kwargs) for seq in _python(sequences)]

    # -- saving -------------------------------------------------------------------------------
    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        filename_prefix: str | None = None,
        push_to_hub: bool = False,
        **kwargs: Any,
    ) -> tuple[str, ...]:
        """Write both SentencePiece models, the vocabularies and ``tokenizer_config.json``, swapped in atomically."""
        from .fast import _json_bytes, _write_staged

        refuse_push_to_hub(push_to_hub)
        folder = Path(save_directory)
        if folder.is_file():
            raise ConfigError(f"save_pretrained: {str(folder)!r} is a file; pass a directory.")
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        config = {k: v for k, v in self.init_kwargs.items() if k not in _NOT_SAVED}
        config.update(
            self.special_tokens_map,
            tokenizer_class="MarianTokenizer",
            model_max_length=self.model_max_length,
            clean_up_tokenization_spaces=self.clean_up_tokenization_spaces,
            separate_vocabs=self.separate_vocabs,
        )
        if self.extra_special_tokens:
            config["additional_special_tokens"] = list(self.extra_special_tokens)
        contents = {
            prefix + SOURCE_SPM: self._spm_bytes[0],
            prefix + TARGET_SPM: self._spm_bytes[1],
            prefix + VOCAB: _json_bytes(self.encoder),
            prefix + _files.TOKENIZER_CONFIG_FILE: _json_bytes(config),
            prefix + _files.SPECIAL_TOKENS_MAP_FILE: _json_bytes(self.special_tokens_map),
        }
        if self.separate_vocabs:
            contents[prefix + TARGET_VOCAB] = _json_bytes(self.target_encoder)
        return _write_staged(folder, contents)

    def __repr__(self) -> str:
        return (
            f"MarianTokenizer(name_or_path='{self.name_or_path}', vocab_size={self.vocab_size}, "
            f"separate_vocabs={self.separate_vocabs}, special_tokens={self.special_tokens_map})"
        )


def _pad(row: list[int], length: int, fill: int, side: str) -> list[int]:
    missing = length - len(row)
    if missing <= 0:
        return row
    return row + [fill] * missing if side == "right" else [fill] * missing + row


def _python(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return value

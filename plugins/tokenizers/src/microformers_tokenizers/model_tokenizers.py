"""Model-specific tokenizer class names: ``BertTokenizer``, ``DistilBertTokenizer``, ``GPT2Tokenizer``, ``RobertaTokenizer``.

Each is ``PreTrainedTokenizerFast`` with its class's behaviour fixed (the profile in ``_profiles`` that a
``tokenizer_config.json`` naming that class selects): ``BertTokenizer.from_pretrained(folder)`` tokenizes as a
BERT tokenizer whatever class the folder's config names, and ``AutoTokenizer`` hands back an instance of the
class the config names. They can also be built from a vocabulary, as the reference's classes are:
``BertTokenizer(vocab)`` (a ``vocab.txt`` path or a token -> id dict) and ``GPT2Tokenizer(vocab, merges)``
(a ``vocab.json`` path or dict, a ``merges.txt`` path or list of merges); ``vocab_file=`` / ``merges_file=`` are
the same arguments under their classic names (the reference ignores those; here they are used).

There is no separate slow (pure-Python) tokenizer: as in the reference (version 5), ``XTokenizerFast`` is the
same class as ``XTokenizer``, and ``use_fast=False`` is accepted and changes nothing (the reference's
``AutoTokenizer`` ignores it too), since both give the same ids.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

from tokenizers import Tokenizer
from tokenizers.models import BPE

from microformers.errors import ConfigError, FileMissingError

from . import _files
from ._profiles import bert_from_vocab, profile_for
from .tokenizer import PreTrainedTokenizerFast

__all__ = [
    "BertTokenizer",
    "BertTokenizerFast",
    "DistilBertTokenizer",
    "DistilBertTokenizerFast",
    "GPT2Tokenizer",
    "GPT2TokenizerFast",
    "RobertaTokenizer",
    "RobertaTokenizerFast",
    "bpe_vocab_and_merges",
    "model_tokenizer_class",
    "parse_merges_txt",
]


def _read(path: str | os.PathLike[str], what: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise FileMissingError(f"{what} {str(path)!r} does not exist; pass the file's path or its contents")
    return file.read_text(encoding="utf-8")


def parse_merges_txt(text: str) -> list[str]:
    """``merges.txt``: one ``left right`` merge a line, in rank order; the ``#version`` header and blank lines skipped."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#version")]


def bpe_vocab_and_merges(
    vocab: str | os.PathLike[str] | dict[str, int] | None, merges: str | os.PathLike[str] | list[Any] | None
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE's vocabulary and merge pairs from a ``vocab.json`` path or dict and a ``merges.txt`` path or
    list of merges (``"a b"`` strings or pairs), as the slow-tokenizer files of GPT-2, RoBERTa and CLIP hold them."""
    if vocab is None:
        vocab = {}
    elif isinstance(vocab, (str, os.PathLike)):
        try:
            vocab = json.loads(_read(vocab, "vocab file (vocab.json)"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"vocab file {str(vocab)!r} is not valid JSON ({exc}); pass a vocab.json") from exc
    if not isinstance(vocab, dict):
        raise ConfigError(f"vocab must be a vocab.json path or a token -> id dict, got {type(vocab).__name__}")
    if isinstance(merges, (str, os.PathLike)):
        merges = parse_merges_txt(_read(merges, "merges file (merges.txt)"))
    pairs: list[tuple[str, str]] = []
    for merge in merges or []:
        pair = tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge)
        if len(pair) != 2:
            raise ConfigError(f"each merge must be two tokens ('a b' or ('a', 'b')), got {merge!r}")
        pairs.append((str(pair[0]), str(pair[1])))
    return vocab, pairs


class ModelTokenizer(PreTrainedTokenizerFast):
    """``PreTrainedTokenizerFast`` with one class's behaviour (``class_name``) whatever a config names."""

    class_name: ClassVar[str] = ""

    def __init__(
        self,
        vocab: str | os.PathLike[str] | dict[str, int] | None = None,
        merges: str | os.PathLike[str] | list[Any] | None = None,
        *,
        tokenizer_object: Tokenizer | None = None,
        tokenizer_file: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        profile = profile_for(self.class_name, None)
        kwargs.pop("profile", None)
        if "vocab_file" in kwargs:  # the classic spelling of the same argument
            if vocab is not None:
                raise ConfigError(f"{type(self).__name__}: pass vocab or vocab_file, not both")
            vocab = kwargs.pop("vocab_file")
        if "merges_file" in kwargs:
            if merges is not None:
                raise ConfigError(f"{type(self).__name__}: pass merges or merges_file, not both")
            merges = kwargs.pop("merges_file")
        if tokenizer_object is not None or tokenizer_file is not None:
            if vocab is not None or merges is not None:
                raise ConfigError(
                    f"{type(self).__name__}: pass either vocab/merges or tokenizer_object/tokenizer_file, not both"
                )
        else:
            for key, value in profile.default_tokens.items():
                kwargs.setdefault(key, value)
            tokenizer_object = self._backend_from_vocab(vocab, merges, kwargs)
        super().__init__(tokenizer_object, tokenizer_file=tokenizer_file, profile=profile, **kwargs)

    def _backend_from_vocab(self, vocab: Any, merges: Any, config: dict[str, Any]) -> Tokenizer:
        raise NotImplementedError


class BertTokenizer(ModelTokenizer):
    """BERT's WordPiece tokenizer: ``[CLS] A [SEP] B [SEP]``, token type ids, lowercasing (``do_lower_case``)."""

    class_name = "BertTokenizer"

    def _backend_from_vocab(self, vocab: Any, merges: Any, config: dict[str, Any]) -> Tokenizer:
        if merges is not None:
            raise ConfigError(f"{type(self).__name__} is a WordPiece tokenizer and takes no merges")
        if vocab is None:  # the reference's default: the special tokens alone
            names = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
            vocab = {str(config[name]): index for index, name in enumerate(names)}
        elif isinstance(vocab, (str, os.PathLike)):
            vocab = _files.parse_vocab_txt(_read(vocab, "vocab file (vocab.txt)"))
        elif not isinstance(vocab, dict):
            raise ConfigError(f"vocab must be a vocab.txt path or a token -> id dict, got {type(vocab).__name__}")
        return bert_from_vocab(vocab, config)


class DistilBertTokenizer(BertTokenizer):
    """BERT's tokenizer without token type ids among the model inputs."""

    class_name = "DistilBertTokenizer"


class GPT2Tokenizer(ModelTokenizer):
    """GPT-2's byte-level BPE (``add_prefix_space`` as configured); ``<|endoftext|>`` for bos, eos and unk."""

    class_name = "GPT2Tokenizer"

    def _backend_from_vocab(self, vocab: Any, merges: Any, config: dict[str, Any]) -> Tokenizer:
        vocab, pairs = bpe_vocab_and_merges(vocab, merges)
        backend = Tokenizer(
            BPE(vocab, pairs, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, dropout=None)
        )
        profile = profile_for(self.class_name, None)
        if profile.set_pipeline is not None:
            profile.set_pipeline(backend, config)
        return backend


class RobertaTokenizer(GPT2Tokenizer):
    """RoBERTa's byte-level BPE: ``<s> A </s></s> B </s>``, ``<pad>``/``<mask>``/``<unk>`` special tokens."""

    class_name = "RobertaTokenizer"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The <s> ... </s> post-processor needs the ids of cls and sep, which a vocabulary without them only has
        # once the special tokens are added (above): build the pipeline again now, as the reference does.
        settings = {
            "cls_token": self.cls_token,
            "sep_token": self.sep_token,
            "add_prefix_space": self.add_prefix_space,
            "trim_offsets": self.init_kwargs.get("trim_offsets", True),
        }
        set_pipeline = profile_for(self.class_name, None).set_pipeline
        if set_pipeline is not None:
            set_pipeline(self._tokenizer, settings)


# As in the reference (version 5), the "Fast" names are the same classes.
BertTokenizerFast = BertTokenizer
DistilBertTokenizerFast = DistilBertTokenizer
GPT2TokenizerFast = GPT2Tokenizer
RobertaTokenizerFast = RobertaTokenizer

_BY_NAME: dict[str, type[ModelTokenizer]] = {
    cls.class_name: cls for cls in (BertTokenizer, DistilBertTokenizer, GPT2Tokenizer, RobertaTokenizer)
}


def model_tokenizer_class(class_name: str | None) -> type[PreTrainedTokenizerFast] | None:
    """The class for a ``tokenizer_class`` value (with or without ``Fast``), ``None`` when it has none here."""
    return _BY_NAME.get(class_name.removesuffix("Fast")) if class_name else None

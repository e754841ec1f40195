"""``SiglipTokenizer``: SigLIP's SentencePiece tokenizer (``spiece.model``), as a ``tokenizers`` pipeline.

The reference's SigLIP tokenizer runs SentencePiece on canonicalised text: lowercased (``do_lower_case``, the
default), ASCII punctuation removed, whitespace runs made one space, the ends stripped; ``</s>`` ends every text
and also pads (SigLIP was trained on texts padded to 64 tokens: ``padding="max_length"``). Here the same steps are
the normalizer in front of microformers-sentencepiece's T5 pipeline (a Unigram model over the pieces, SentencePiece's
own character map after the canonicalisation, as the reference applies it), without T5's ``<extra_id_N>`` tokens.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

from tokenizers import Regex, normalizers, pre_tokenizers

from microformers.errors import InputError
from microformers_sentencepiece import SpmModel, T5Tokenizer

__all__ = ["SiglipTokenizer"]

_PUNCTUATION = "[" + re.escape(string.punctuation) + "]"


def _without_leading_space(texts: Any) -> tuple[Any, list[int]]:
    """Texts with their leading whitespace removed, and how many characters each lost."""
    if isinstance(texts, str):
        stripped = texts.lstrip()
        return stripped, [len(texts) - len(stripped)]
    if isinstance(texts, (list, tuple)) and all(isinstance(t, str) for t in texts):
        stripped_all = [t.lstrip() for t in texts]
        return stripped_all, [len(t) - len(s) for t, s in zip(texts, stripped_all)]
    return texts, []


class SiglipTokenizer(T5Tokenizer):
    """SigLIP's tokenizer (``tokenizer_class: SiglipTokenizer``); ids equal the reference's."""

    spm_file = "spiece.model"
    class_name = "SiglipTokenizer"

    @classmethod
    def from_files(cls, files: Mapping[str, Any], *init_inputs: Any, **kwargs: Any) -> Any:
        # The SentencePiece model is the source of truth; a tokenizer.json beside it (ours) is derived from it.
        if files.get(cls.spm_file) is not None:
            files = {name: value for name, value in files.items() if name != "tokenizer.json"}
        return super().from_files(files, *init_inputs, **kwargs)

    @classmethod
    def _build(
        cls,
        vocab: list[tuple[str, float]],
        charsmap: bytes | None,
        spm_specials: list[str],
        config: dict[str, Any],
        spm: SpmModel | None,
        converted: bool = False,
    ) -> SiglipTokenizer:
        config["extra_ids"] = 0
        config.setdefault("eos_token", "</s>")
        config.setdefault("unk_token", "<unk>")
        config.setdefault("pad_token", "</s>")
        config.setdefault("model_max_length", 64)
        lowercase = bool(config.setdefault("do_lower_case", True))
        tokenizer = super()._build(vocab, charsmap, spm_specials, config, spm, converted)
        steps: list[Any] = [normalizers.Lowercase()] if lowercase else []
        steps += [
            normalizers.Replace(Regex(_PUNCTUATION), ""),
            normalizers.Replace(Regex(r"\s+"), " "),
            normalizers.Strip(),
        ]
        if charsmap:
            steps.append(normalizers.Precompiled(charsmap))
        tokenizer.backend_tokenizer.normalizer = normalizers.Sequence(steps)
        # "▁" only before the text's start, not after a special token inside it (the reference's SentencePiece
        # runs without its dummy prefix on each piece between special tokens).
        tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme="first", split=True
        )
        return tokenizer  # type: ignore[return-value]

    # -- the text's start ------------------------------------------------------------------------
    # The pipeline puts "▁" before the piece that starts at the text's first character only (so not after a special
    # token inside the text, as the reference does); the reference strips the text first, so leading whitespace is
    # removed here, before the backend sees the text, and offsets are moved back onto the original text.
    def _encode(self, text: Any, text_pair: Any, *args: Any, **kwargs: Any) -> Any:
        text, shifts = _without_leading_space(text)
        text_pair, pair_shifts = _without_leading_space(text_pair)
        if kwargs.get("add_special_tokens", True):
            # The reference adds </s> only to a text that does not already end with it.
            text, text_pair = self._without_final_eos(text), self._without_final_eos(text_pair)
        wants_offsets = bool(kwargs.get("return_offsets_mapping"))
        if wants_offsets and any(pair_shifts):
            raise InputError(
                "SiglipTokenizer: return_offsets_mapping=True with a text_pair that starts with whitespace is not "
                "supported; strip the pair texts first"
            )
        encoding = super()._encode(text, text_pair, *args, **kwargs)
        if wants_offsets and any(shifts) and kwargs.get("return_tensors") is None:
            rows = encoding["offset_mapping"]
            single = isinstance(text, str)
            rows = [rows] if single else rows
            moved = [[(a + shift, b + shift) if b > 0 else (a, b) for a, b in row] for row, shift in zip(rows, shifts)]
            encoding["offset_mapping"] = moved[0] if single else moved
        elif wants_offsets and any(shifts):
            raise InputError(
                "SiglipTokenizer: return_offsets_mapping=True with return_tensors and texts that start with "
                "whitespace is not supported; strip the texts first"
            )
        return encoding

    def _without_final_eos(self, texts: Any) -> Any:
        eos = str(self.eos_token)

        def cut(text: str) -> str:
            trimmed = text.rstrip()
            return trimmed[: -len(eos)] if trimmed.endswith(eos) else text

        if isinstance(texts, str):
            return cut(texts)
        if isinstance(texts, (list, tuple)) and all(isinstance(t, str) for t in texts):
            return [cut(t) for t in texts]
        return texts

    def tokenize(
        self, text: str, pair: str | None = None, add_special_tokens: bool = False, **kwargs: Any
    ) -> list[str]:
        return super().tokenize(
            text.lstrip() if isinstance(text, str) else text,
            pair.lstrip() if isinstance(pair, str) else pair,
            add_special_tokens=add_special_tokens,
            **kwargs,
        )

    # -- decoding ---------------------------------------------------------------------------------
    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> str | list[str]:
        """As the reference's SentencePiece decoding: with special tokens kept, a space goes before each run of
        text that ends at a special token, and the result is stripped."""
        if skip_special_tokens:
            return super().decode(token_ids, True, clean_up_tokenization_spaces, **kwargs)
        if hasattr(token_ids, "tolist"):
            token_ids = token_ids.tolist()
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if token_ids and isinstance(token_ids[0], (list, tuple)):
            return [str(self.decode(row, False, clean_up_tokenization_spaces)) for row in token_ids]
        specials = set(self.all_special_tokens)
        text, pieces, after_special = "", [], False
        for token in self.convert_ids_to_tokens(list(token_ids)):
            if token in specials:
                text += ("" if after_special else " ") + self._join_pieces(pieces) + token
                pieces, after_special = [], True
            else:
                pieces.append(token)
                after_special = False
        return (text + self._join_pieces(pieces)).strip()

    def _join_pieces(self, pieces: list[str]) -> str:
        return self.backend_tokenizer.decoder.decode(pieces) if pieces else ""

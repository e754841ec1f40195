"""``CLIPTokenizerFast`` (also served as ``CLIPTokenizer``): CLIP's byte-level BPE over ``tokenizer.json``.

As the reference implementation does for this class, the vocabulary and merges are taken from ``tokenizer.json``
and the rest of the pipeline is CLIP's own: NFC, whitespace runs to one space, lowercase; words split by CLIP's
pattern, then byte-level; BPE marking word ends with ``</w>``; ``<|startoftext|> text <|endoftext|>`` around each
text. Decoding turns the ``</w>`` marks back into spaces and strips the ends.
"""

from __future__ import annotations

import json
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors

from microformers.errors import ConfigError
from microformers_tokenizers import PreTrainedTokenizerFast

__all__ = ["CLIPTokenizer", "CLIPTokenizerFast"]

# CLIP's word pattern (a fact of the tokenizer format): the two special tokens, English contractions, letter runs,
# single digits, runs of other non-space characters.
_WORDS = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
_END_OF_WORD = "</w>"
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


class CLIPTokenizerFast(PreTrainedTokenizerFast):
    """CLIP's tokenizer (``<|startoftext|>``, ``<|endoftext|>`` also as unknown and padding token)."""

    def __init__(self, tokenizer_object: Tokenizer | None = None, **kwargs: Any) -> None:
        for name, default in _DEFAULT_TOKENS.items():
            kwargs.setdefault(name, default)
        if tokenizer_object is None and kwargs.get("tokenizer_file") is not None:
            tokenizer_object = Tokenizer.from_file(str(kwargs.pop("tokenizer_file")))
        if tokenizer_object is None:
            raise ConfigError(
                "CLIPTokenizerFast needs a tokenizer.json: use CLIPTokenizerFast.from_pretrained(folder) or pass "
                "tokenizer_object= / tokenizer_file="
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

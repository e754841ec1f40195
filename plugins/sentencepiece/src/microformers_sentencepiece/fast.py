"""T5 and mBART tokenizers: a SentencePiece model converted to a ``tokenizers`` pipeline.

The reference converts these SentencePiece files to its fast tokenizer (a Unigram model over the
pieces and scores, even for mBART's BPE file) with a per-class vocabulary layout and pipeline; the
classes here build the same pipeline, so ids, masks and decoding are those of
``microformers_tokenizers.PreTrainedTokenizerFast``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram

from microformers.configuration import refuse_push_to_hub
from microformers.errors import ConfigError, FileMissingError
from microformers_tokenizers import HUB_ARGUMENTS, BatchEncoding, PreTrainedTokenizerFast

from . import _files
from .spm_model import SpmModel, read_spm_bytes

MBART_LANGUAGE_CODES: tuple[str, ...] = (
    "ar_AR", "cs_CZ", "de_DE", "en_XX", "es_XX", "et_EE", "fi_FI", "fr_XX", "gu_IN", "hi_IN", "it_IT", "ja_XX",
    "kk_KZ", "ko_KR", "lt_LT", "lv_LV", "my_MM", "ne_NP", "nl_XX", "ro_RO", "ru_RU", "si_LK", "tr_TR", "vi_VN",
    "zh_CN",
)  # fmt: skip
MBART50_LANGUAGE_CODES: tuple[str, ...] = (
    *MBART_LANGUAGE_CODES,
    "af_ZA", "az_AZ", "bn_IN", "fa_IR", "he_IL", "hr_HR", "id_ID", "ka_GE", "km_KH", "mk_MK", "ml_IN", "mn_MN",
    "mr_IN", "pl_PL", "ps_AF", "pt_XX", "sv_SE", "sw_KE", "ta_IN", "te_IN", "th_TH", "tl_XX", "uk_UA", "ur_PK",
    "xh_ZA", "gl_ES", "sl_SI",
)  # fmt: skip


def _metaspace_pre_tokenizer(whitespace_split: bool) -> Any:
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    if not whitespace_split:
        return metaspace
    return pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), metaspace])


def _special(token: Any) -> AddedToken:
    return token if isinstance(token, AddedToken) else AddedToken(str(token), normalized=False, special=True)


class SentencePieceTokenizerFast(PreTrainedTokenizerFast):
    """Shared loading and saving of the SentencePiece-backed fast tokenizers."""

    spm_file: ClassVar[str] = "spiece.model"
    class_name: ClassVar[str] = ""

    def __init__(self, tokenizer_object: Tokenizer, *, spm_bytes: bytes | None = None, **kwargs: Any) -> None:
        self._spm_bytes = spm_bytes
        super().__init__(tokenizer_object=tokenizer_object, **kwargs)

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def can_load(cls, path: str | os.PathLike[str]) -> bool:
        return _files.can_load(path)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *init_inputs: Any, **kwargs: Any) -> Any:
        """Load the tokenizer in a local folder (``AutoTokenizer`` resolves Hub ids to folders)."""
        for ignored in HUB_ARGUMENTS:
            kwargs.pop(ignored, None)
        folder = Path(path)
        files = _files.read_folder(folder, [cls.spm_file])
        kwargs.setdefault("name_or_path", str(path))
        return cls.from_files(files, *init_inputs, **kwargs)

    @classmethod
    def from_files(cls, files: Mapping[str, Any], *init_inputs: Any, **kwargs: Any) -> Any:
        """Build from in-memory files: the SentencePiece model's bytes under its file name (or a Unigram
        ``tokenizer.json`` text), ``tokenizer_config.json`` / ``special_tokens_map.json`` as dicts."""
        where = str(kwargs.get("name_or_path") or "<in-memory files>")
        config = _files.merged_config(files, kwargs)
        spm: SpmModel | None = None
        raw = files.get(cls.spm_file)
        if raw is not None:
            if isinstance(raw, str):
                raise ConfigError(f"from_files: {cls.spm_file} must be the model's bytes, not text")
            spm = read_spm_bytes(bytes(raw), f"{where}/{cls.spm_file}")
        tokenizer_json = files.get(_files.TOKENIZER_FILE)
        if tokenizer_json is not None:
            vocab, charsmap = _files.unigram_from_tokenizer_json(str(tokenizer_json), where)
            return cls._build(vocab, charsmap, [], config, spm, converted=True)
        if spm is None:
            raise FileMissingError(
                f"{where}/{cls.spm_file} is missing: {cls.__name__} needs the SentencePiece model file "
                f"{cls.spm_file!r} (or a tokenizer.json). Put it in the folder (download it with the tokenizer "
                "files) or save the tokenizer again with save_pretrained."
            )
        return cls._build(spm.vocab, spm.precompiled_charsmap or None, spm.special_pieces, config, spm)

    @classmethod
    def _build(
        cls,
        vocab: list[tuple[str, float]],
        charsmap: bytes | None,
        spm_specials: list[str],
        config: dict[str, Any],
        spm: SpmModel | None,
        converted: bool = False,
    ) -> Any:
        raise NotImplementedError

    # -- behaviour ----------------------------------------------------------------------------
    def as_target_tokenizer(self) -> Any:
        raise ConfigError(
            f"{type(self).__name__}.as_target_tokenizer() was removed from the Transformers API; tokenize targets "
            "with tokenizer(text, text_target=labels) (or tokenizer(text_target=labels)) instead."
        )

    def _config_to_save(self) -> dict[str, Any]:
        config = super()._config_to_save()
        config["tokenizer_class"] = self.class_name
        return config

    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        legacy_format: bool | None = None,
        filename_prefix: str | None = None,
        push_to_hub: bool = False,
        **kwargs: Any,
    ) -> tuple[str, ...]:
        """Write ``tokenizer_config.json``, ``special_tokens_map.json``, ``tokenizer.json`` and the SentencePiece
        model into ``save_directory``, swapped in atomically (a failed save leaves the old folder)."""
        refuse_push_to_hub(push_to_hub)
        folder = Path(save_directory)
        if folder.is_file():
            raise ConfigError(f"save_pretrained: {str(folder)!r} is a file; pass a directory.")
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        config = self._config_to_save()
        contents: dict[str, bytes] = {
            prefix + _files.TOKENIZER_CONFIG_FILE: _json_bytes(config),
            prefix + _files.SPECIAL_TOKENS_MAP_FILE: _json_bytes(self.special_tokens_map),
            prefix + _files.TOKENIZER_FILE: self.backend_tokenizer.to_str(pretty=True).encode("utf-8"),
        }
        if self._spm_bytes is not None:
            contents[prefix + self.spm_file] = self._spm_bytes
        return _write_staged(folder, contents)


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _write_staged(folder: Path, contents: Mapping[str, bytes]) -> tuple[str, ...]:
    from microformers.hub import staged_folder

    blocked = [str(folder / name) for name in contents if (folder / name).is_dir()]
    if blocked:
        raise ConfigError(f"save_pretrained cannot write {blocked}: a directory has that name; remove it first.")
    folder.mkdir(parents=True, exist_ok=True)
    with staged_folder(folder) as staging:
        for name, data in contents.items():
            (staging / name).write_bytes(data)
    return tuple(str(folder / name) for name in contents)


# -- T5 -------------------------------------------------------------------------------------------
class T5Tokenizer(SentencePieceTokenizerFast):
    """T5's tokenizer: ``spiece.model`` (Unigram), ``</s>`` after every sequence, ``<extra_id_N>`` sentinels
    appended at the end of the vocabulary in reverse order (``<extra_id_0>`` has the highest id)."""

    spm_file = "spiece.model"
    class_name = "T5Tokenizer"

    @classmethod
    def _build(
        cls,
        vocab: list[tuple[str, float]],
        charsmap: bytes | None,
        spm_specials: list[str],
        config: dict[str, Any],
        spm: SpmModel | None,
        converted: bool = False,
    ) -> T5Tokenizer:
        extra_ids = int(config.get("extra_ids", 100))
        config["extra_ids"] = extra_ids
        eos = config.setdefault("eos_token", "</s>")
        config.setdefault("unk_token", "<unk>")
        config.setdefault("pad_token", "<pad>")
        listed = config.pop("additional_special_tokens", None) or config.pop("extra_special_tokens", None)
        listed = list(listed) if isinstance(listed, list | tuple) else []
        sentinels = [f"<extra_id_{i}>" for i in range(extra_ids)]
        named = [str(t) for t in listed if "<extra_id_" in str(t)]
        if named and extra_ids > 0 and len(named) != extra_ids:
            raise ConfigError(
                f"T5Tokenizer: extra_ids={extra_ids} but additional_special_tokens lists {len(named)} <extra_id_N> "
                "tokens; make them agree in tokenizer_config.json (or pass extra_ids=)."
            )
        extras = [*spm_specials, *listed]
        if not named:
            extras += sentinels
        if not converted:
            vocab = [*vocab, *((f"<extra_id_{i}>", 0.0) for i in range(extra_ids - 1, -1, -1))]
        pieces = [p for p, _ in vocab]
        unk_id = pieces.index(str(config["unk_token"])) if str(config["unk_token"]) in pieces else 2
        backend = Tokenizer(Unigram(vocab, unk_id=unk_id, byte_fallback=False))
        if charsmap:
            backend.normalizer = normalizers.Precompiled(charsmap)
        backend.pre_tokenizer = _metaspace_pre_tokenizer(whitespace_split=True)
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
        seen: dict[str, None] = {}
        config["extra_special_tokens"] = [
            _special(t) for t in extras if not (str(t) in seen or seen.setdefault(str(t)))
        ]
        config.pop("add_bos_token", None)
        config.pop("add_eos_token", None)
        tokenizer = cls(backend, spm_bytes=spm.serialized if spm is not None else None, **config)
        eos_id = tokenizer.convert_tokens_to_ids(str(eos))
        tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single=["$A", str(eos)], pair=["$A", str(eos), "$B", str(eos)], special_tokens=[(str(eos), eos_id)]
        )
        return tokenizer

    def get_sentinel_tokens(self) -> list[str]:
        """The ``<extra_id_N>`` tokens."""
        return [t for t in self.extra_special_tokens if t.startswith("<extra_id_") and t.endswith(">")]

    def get_sentinel_token_ids(self) -> list[int]:
        return [self.convert_tokens_to_ids(t) for t in self.get_sentinel_tokens()]


class T5TokenizerFast(T5Tokenizer):
    """The same tokenizer (the reference's fast and slow names are one class)."""

    class_name = "T5TokenizerFast"


# -- mBART ----------------------------------------------------------------------------------------
class MBartTokenizer(SentencePieceTokenizerFast):
    """mBART's tokenizer: ``sentencepiece.bpe.model`` with the fairseq ids (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2,
    ``<unk>`` 3, SentencePiece ids + 1), the language codes after the pieces and ``<mask>`` last.

    Source text ends with ``</s> src_lang``; ``text_target=`` ends with ``</s> tgt_lang``.
    """

    spm_file = "sentencepiece.bpe.model"
    class_name = "MBartTokenizer"
    language_codes: ClassVar[tuple[str, ...]] = MBART_LANGUAGE_CODES
    lang_code_first: ClassVar[bool] = False

    @classmethod
    def _normalizer(cls, charsmap: bytes | None) -> Any:
        return None

    @classmethod
    def _build(
        cls,
        vocab: list[tuple[str, float]],
        charsmap: bytes | None,
        spm_specials: list[str],
        config: dict[str, Any],
        spm: SpmModel | None,
        converted: bool = False,
    ) -> MBartTokenizer:
        # mBART-50 has no bos_token (its first id is the cls_token).
        defaults = {} if cls.lang_code_first else {"bos_token": "<s>"}
        defaults |= {
            "eos_token": "</s>",
            "sep_token": "</s>",
            "cls_token": "<s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
        }
        for key, value in defaults.items():
            config.setdefault(key, value)
        mask = config.get("mask_token", "<mask>")
        config["mask_token"] = AddedToken(mask, lstrip=True, rstrip=False, normalized=False, special=True)
        first = config["cls_token"] if cls.lang_code_first else config["bos_token"]
        if not converted:
            head = [(str(first), 0.0), (str(config["pad_token"]), 0.0), (str(config["eos_token"]), 0.0)]
            head.append((str(config["unk_token"]), 0.0))
            vocab = [*head, *vocab[3:], *((code, 0.0) for code in cls.language_codes), (str(mask), 0.0)]
        backend = Tokenizer(Unigram(vocab, unk_id=3, byte_fallback=False))
        backend.normalizer = cls._normalizer(charsmap)
        backend.pre_tokenizer = _metaspace_pre_tokenizer(whitespace_split=not cls.lang_code_first)
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
        listed = config.pop("additional_special_tokens", None) or config.pop("extra_special_tokens", None)
        listed = list(listed) if isinstance(listed, list | tuple) else []
        extras: dict[str, None] = {}
        for token in [*cls.language_codes, *spm_specials, *listed]:
            extras.setdefault(str(token))
        config["extra_special_tokens"] = [_special(t) for t in extras]
        config.pop("add_bos_token", None)
        config.pop("add_eos_token", None)
        src_lang = config.pop("src_lang", None)
        tgt_lang = config.pop("tgt_lang", None)
        tokenizer = cls(backend, spm_bytes=spm.serialized if spm is not None else None, **config)
        tokenizer._tgt_lang = None
        tokenizer.src_lang = src_lang if src_lang is not None else "en_XX"
        tokenizer.tgt_lang = tgt_lang
        return tokenizer

    # -- languages ----------------------------------------------------------------------------
    @property
    def lang_code_to_id(self) -> dict[str, int]:
        return {code: self.convert_tokens_to_ids(code) for code in self.language_codes}

    def _check_lang(self, setting: str, code: str) -> str:
        known = set(self.language_codes) | set(self.extra_special_tokens)
        if not isinstance(code, str) or code not in known or self._tokenizer.token_to_id(code) is None:
            raise ConfigError(
                f"{type(self).__name__}: {setting}={code!r} is not a language code of this tokenizer; use one of "
                f"{', '.join(self.language_codes)}."
            )
        return code

    @property
    def src_lang(self) -> str:
        return self._src_lang

    @src_lang.setter
    def src_lang(self, code: str) -> None:
        self._src_lang = self._check_lang("src_lang", code)
        self.init_kwargs["src_lang"] = code
        self._set_lang_special_tokens(code)

    @property
    def tgt_lang(self) -> str | None:
        return self._tgt_lang

    @tgt_lang.setter
    def tgt_lang(self, code: str | None) -> None:
        self._tgt_lang = None if code is None else self._check_lang("tgt_lang", code)
        self.init_kwargs["tgt_lang"] = code

    def _set_lang_special_tokens(self, code: str) -> None:
        self.cur_lang_code = self.convert_tokens_to_ids(code)
        eos = str(self.eos_token)
        if self.lang_code_first:
            self.prefix_tokens, self.suffix_tokens = [self.cur_lang_code], [self.eos_token_id]
            single, pair = [code, "$A", eos], [code, "$A", "$B", eos]
        else:
            self.prefix_tokens, self.suffix_tokens = [], [self.eos_token_id, self.cur_lang_code]
            single, pair = ["$A", eos, code], ["$A", "$B", eos, code]
        self._tokenizer.post_processor = processors.TemplateProcessing(
            single=single, pair=pair, special_tokens=[(eos, self.eos_token_id), (code, self.cur_lang_code)]
        )

    def set_src_lang_special_tokens(self, src_lang: str) -> None:
        self._set_lang_special_tokens(self._check_lang("src_lang", src_lang))

    def set_tgt_lang_special_tokens(self, tgt_lang: str) -> None:
        self._set_lang_special_tokens(self._check_lang("tgt_lang", tgt_lang))

    def __call__(
        self,
        text: Any = None,
        text_pair: Any = None,
        text_target: Any = None,
        text_pair_target: Any = None,
        **kwargs: Any,
    ) -> BatchEncoding:
        """Tokenize source text (with ``src_lang``) and/or targets (``text_target=``, with ``tgt_lang``)."""
        if text_target is None and text_pair_target is None:
            return super().__call__(text, text_pair, **kwargs)
        max_target_length = kwargs.pop("max_target_length", None)
        encodings = super().__call__(text, text_pair, **kwargs) if text is not None else None
        if self._tgt_lang is None:
            self._tgt_lang = self._src_lang
        self._set_lang_special_tokens(self._tgt_lang)
        try:
            if max_target_length is not None:
                kwargs["max_length"] = max_target_length
            targets = super().__call__(text_target, text_pair_target, **kwargs)
        finally:
            self._set_lang_special_tokens(self._src_lang)
        if encodings is None:
            return targets
        encodings["labels"] = targets["input_ids"]
        return encodings

    def _build_translation_inputs(
        self, raw_inputs: Any, return_tensors: str | None, src_lang: str | None, tgt_lang: str | None, **extra: Any
    ) -> BatchEncoding:
        """Inputs of the translation pipeline: source text and ``forced_bos_token_id`` of ``tgt_lang``."""
        if src_lang is None or tgt_lang is None:
            raise ConfigError("translation with this tokenizer needs src_lang= and tgt_lang= (language codes)")
        self.src_lang = src_lang
        inputs = self(raw_inputs, add_special_tokens=True, return_tensors=return_tensors, **extra)
        inputs["forced_bos_token_id"] = self.convert_tokens_to_ids(self._check_lang("tgt_lang", tgt_lang))
        return inputs


class MBartTokenizerFast(MBartTokenizer):
    class_name = "MBartTokenizerFast"


class MBart50Tokenizer(MBartTokenizer):
    """mBART-50's tokenizer: 52 language codes, the code first (``src_lang text </s>``)."""

    class_name = "MBart50Tokenizer"
    language_codes = MBART50_LANGUAGE_CODES
    lang_code_first = True

    @classmethod
    def _normalizer(cls, charsmap: bytes | None) -> Any:
        steps = [normalizers.Replace(Regex(r" {2,}"), " ")]
        if charsmap:
            steps.insert(0, normalizers.Precompiled(charsmap))
        return normalizers.Sequence(steps)


class MBart50TokenizerFast(MBart50Tokenizer):
    class_name = "MBart50TokenizerFast"


__all__: Sequence[str] = (
    "MBart50Tokenizer",
    "MBart50TokenizerFast",
    "MBartTokenizer",
    "MBartTokenizerFast",
    "SentencePieceTokenizerFast",
    "T5Tokenizer",
    "T5TokenizerFast",
)

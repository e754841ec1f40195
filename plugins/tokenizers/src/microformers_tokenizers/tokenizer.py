"""``PreTrainedTokenizerFast``: the familiar tokenizer API on top of the ``tokenizers`` library."""

from __future__ import annotations

import copy
import json
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Encoding, Tokenizer, processors

from microformers.configuration import refuse_push_to_hub
from microformers.errors import ConfigError, FileMissingError

from . import _files
from ._profiles import GENERIC, MODEL_TYPE_CLASSES, Profile, bert_from_vocab, profile_for
from .batch_encoding import BatchEncoding, check_tensor_type, to_python
from .chat_template import render_chat_template

logger = logging.getLogger(__name__)

VERY_LARGE_INTEGER = int(1e30)  # model_max_length when the config gives none ("no limit")
LARGE_INTEGER = int(1e20)

SPECIAL_TOKENS_ATTRIBUTES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
PADDING_STRATEGIES = ("longest", "max_length", "do_not_pad")
TRUNCATION_STRATEGIES = ("only_first", "only_second", "longest_first", "do_not_truncate")

# Config keys that describe files or loading, never written back by save_pretrained.
_NOT_SAVED = (
    "name_or_path",
    "tokenizer_file",
    "vocab_file",
    "special_tokens_map_file",
    "added_tokens_decoder",
    "additional_special_tokens",
    "files_loaded",
    "device_map",
    "slow_tokenizer_class",
    "add_bos_token",
    "add_eos_token",
    "chat_template",
    "tokenizer_class",
)
_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"))
_CLEANUPS += ((" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def _as_added_token(value: Any) -> Any:
    """Config values written as ``{"__type": "AddedToken", "content": ...}`` dicts become ``AddedToken``s."""
    if isinstance(value, dict) and "content" in value:
        fields = {
            k: v
            for k, v in value.items()
            if k in ("content", "single_word", "lstrip", "rstrip", "normalized", "special")
        }
        return AddedToken(**fields)
    return value


def _token_state(token: AddedToken) -> dict[str, Any]:
    return {
        "content": token.content,
        "single_word": token.single_word,
        "lstrip": token.lstrip,
        "rstrip": token.rstrip,
        "normalized": token.normalized,
        "special": token.special,
    }


def _is_text_input(value: Any) -> bool:
    if isinstance(value, str):
        return True
    if not isinstance(value, list | tuple):
        return False
    if not value:
        return True
    first = value[0]
    if isinstance(first, str):
        return True
    if isinstance(first, list | tuple):
        if not first or isinstance(first[0], str):
            return True
        if isinstance(first[0], list | tuple):
            return not first[0] or isinstance(first[0][0], str)
    return False


def _special_token(name: str) -> property:
    """``tokenizer.<name>``: the special token's text (None when unset); assigning a str or AddedToken sets it."""
    return property(lambda self: self._token(name), lambda self, value: self._set_token(name, value))


def _special_token_id(name: str) -> property:
    """``tokenizer.<name>_id``: the special token's id (None when unset); assigning an id sets the token."""
    return property(lambda self: self._token_id(name), lambda self, value: self._set_token_id(name, value))


class PreTrainedTokenizerFast:
    """A tokenizer backed by a ``tokenizers.Tokenizer`` with the Transformers tokenizer API.

    Build it with :meth:`from_pretrained` (a local folder with ``tokenizer.json`` and
    ``tokenizer_config.json``, or a BERT folder with only ``vocab.txt``) or :meth:`from_files`
    (the same contents in memory). The ``tokenizer_class`` named in the config selects the
    behaviour the reference implementation gives that class (see ``_profiles``).
    """

    model_input_names: list[str]
    padding_side: str
    truncation_side: str

    # -- construction -------------------------------------------------------------------------
    def __init__(
        self,
        tokenizer_object: Tokenizer | None = None,
        *,
        tokenizer_file: str | os.PathLike[str] | None = None,
        profile: Profile | None = None,
        **kwargs: Any,
    ) -> None:
        if tokenizer_object is not None:
            backend = tokenizer_object
        elif tokenizer_file is not None:
            if not Path(tokenizer_file).is_file():
                raise FileMissingError(
                    f"tokenizer_file {str(tokenizer_file)!r} does not exist; pass a tokenizer.json path."
                )
            backend = Tokenizer.from_file(str(tokenizer_file))
        else:
            raise ConfigError(
                "PreTrainedTokenizerFast needs tokenizer_object= (a tokenizers.Tokenizer) or tokenizer_file= "
                "(a tokenizer.json path); to load a folder use PreTrainedTokenizerFast.from_pretrained(folder)."
            )
        self._tokenizer: Tokenizer = backend
        self._profile = profile or GENERIC
        kwargs = dict(kwargs)
        if "additional_special_tokens" in kwargs and "extra_special_tokens" not in kwargs:
            kwargs["extra_special_tokens"] = kwargs.pop("additional_special_tokens")

        # Truncation / padding baked into tokenizer.json set defaults, like the reference.
        truncation = backend.truncation
        if truncation is not None:
            kwargs.setdefault("truncation_side", truncation["direction"])
        padding = backend.padding
        if padding is not None:
            kwargs.setdefault("pad_token", padding["pad_token"])
            kwargs.setdefault("padding_side", padding["direction"])

        self.init_kwargs: dict[str, Any] = copy.deepcopy({k: v for k, v in kwargs.items() if k != "chat_template"})
        self.name_or_path: str = str(kwargs.pop("name_or_path", ""))
        self.verbose = bool(kwargs.pop("verbose", False))

        self._special: dict[str, Any] = dict.fromkeys(SPECIAL_TOKENS_ATTRIBUTES)
        self._special_names: list[str] = list(SPECIAL_TOKENS_ATTRIBUTES)
        self._extra_special: list[Any] = []
        model_specific = dict(kwargs.pop("model_specific_special_tokens", None) or {})
        for key in list(kwargs):
            value = kwargs[key]
            if key in SPECIAL_TOKENS_ATTRIBUTES:
                value = _as_added_token(kwargs.pop(key))
                if value is not None and not isinstance(value, str | AddedToken):
                    raise ConfigError(f"special token {key} must be a string or AddedToken, got {type(value).__name__}")
                self._special[key] = value
            elif key == "extra_special_tokens":
                value = kwargs.pop(key)
                if isinstance(value, dict):
                    model_specific.update(value)
                elif isinstance(value, list | tuple):
                    self._extra_special = [_as_added_token(v) for v in value]
                elif value is not None:
                    raise ConfigError("extra_special_tokens must be a list of tokens or a dict of named tokens")
            elif key.endswith("_token") and isinstance(_as_added_token(value), str | AddedToken):
                model_specific[key] = _as_added_token(kwargs.pop(key))
        for key, value in model_specific.items():
            self._special_names.append(key)
            self._special[key] = _as_added_token(value)

        model_max_length = kwargs.pop("model_max_length", kwargs.pop("max_len", None))
        self.model_max_length: int = int(model_max_length) if model_max_length is not None else VERY_LARGE_INTEGER
        self.padding_side = kwargs.pop("padding_side", self._profile.padding_side)
        self.truncation_side = kwargs.pop("truncation_side", "right")
        for name in ("padding_side", "truncation_side"):
            if getattr(self, name) not in ("left", "right"):
                raise ConfigError(
                    f"{name} must be 'left' or 'right', got {getattr(self, name)!r} (tokenizer_config.json)"
                )
        self.model_input_names = list(kwargs.pop("model_input_names", self._profile.model_input_names))
        self.clean_up_tokenization_spaces = bool(kwargs.pop("clean_up_tokenization_spaces", False))
        self.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = bool(
            kwargs.pop("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)
        )
        self.split_special_tokens = bool(kwargs.pop("split_special_tokens", False))
        self._pad_token_type_id = 0
        chat_template = kwargs.pop("chat_template", None)
        if isinstance(chat_template, list | tuple):
            chat_template = {t["name"]: t["template"] for t in chat_template}
        self.chat_template: str | dict[str, str] | None = chat_template
        explicit_bos_eos = "add_bos_token" in kwargs or "add_eos_token" in kwargs
        self._add_bos_token = bool(kwargs.pop("add_bos_token", False))
        self._add_eos_token = bool(kwargs.pop("add_eos_token", False))
        self.add_prefix_space = kwargs.get("add_prefix_space", False)
        for key in ("do_lower_case", "legacy", "errors"):
            if key in kwargs:
                setattr(self, key, kwargs[key])
        self._warned_too_long = False
        self._last_settings: tuple[Any, Any] | None = None

        self._add_missing_special_tokens(kwargs.get("added_tokens_decoder"))
        if self._profile.cls_sep_post_processor:
            self._set_cls_sep_post_processor()
        elif explicit_bos_eos or backend.post_processor is None:
            self.update_post_processor()
        self._tokenizer.encode_special_tokens = self.split_special_tokens

    def _add_missing_special_tokens(self, added_tokens_decoder: Any) -> None:
        present = {t.content for t in self._tokenizer.get_added_tokens_decoder().values()}
        to_add: list[AddedToken] = []
        if isinstance(added_tokens_decoder, Mapping):
            for _, token in sorted(added_tokens_decoder.items(), key=lambda item: int(item[0])):
                token = _as_added_token(token)
                if isinstance(token, AddedToken) and token.content not in present:
                    to_add.append(token)
                    present.add(token.content)
        named = {str(v) for v in self._special.values() if v is not None}
        for value in [*self._special.values(), *self._extra_special]:
            if value is None or str(value) in present:
                continue
            if isinstance(value, str):
                value = AddedToken(value, special=True)
            elif str(value) in named and not value.special:
                value = AddedToken(value.content, value.single_word, value.lstrip, value.rstrip, value.normalized, True)
            to_add.append(value)
            present.add(str(value))
        if to_add:
            self._tokenizer.add_tokens(to_add)

    def _set_cls_sep_post_processor(self) -> None:
        cls, sep = str(self.cls_token), str(self.sep_token)
        cls_id = self.cls_token_id if self.cls_token_id is not None else 2
        sep_id = self.sep_token_id if self.sep_token_id is not None else 3
        self._tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, cls_id), (sep, sep_id)],
        )

    def update_post_processor(self) -> None:
        """Rebuild the post-processor from ``add_bos_token`` / ``add_eos_token`` and the current bos/eos."""
        bos, eos = self.bos_token, self.eos_token
        add_bos = self._add_bos_token and bos is not None
        add_eos = self._add_eos_token and eos is not None
        single = f"{(bos + ':0 ') if add_bos else ''}$A:0{(' ' + eos + ':0') if add_eos else ''}"
        pair = f"{single}{(' ' + bos + ':1') if add_bos else ''} $B:1{(' ' + eos + ':1') if add_eos else ''}"
        special = []
        if add_bos:
            special.append((bos, self.bos_token_id))
        if add_eos:
            special.append((eos, self.eos_token_id))
        self._tokenizer.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)

    @property
    def add_bos_token(self) -> bool:
        return self._add_bos_token

    @add_bos_token.setter
    def add_bos_token(self, value: bool) -> None:
        self._add_bos_token = bool(value)
        self.update_post_processor()

    @property
    def add_eos_token(self) -> bool:
        return self._add_eos_token

    @add_eos_token.setter
    def add_eos_token(self, value: bool) -> None:
        self._add_eos_token = bool(value)
        self.update_post_processor()

    @classmethod
    def can_load(cls, path: str | os.PathLike[str]) -> bool:
        """True when ``path`` is a folder with a ``tokenizer.json`` or a WordPiece ``vocab.txt``."""
        return _files.can_load(path)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *init_inputs: Any, **kwargs: Any) -> PreTrainedTokenizerFast:
        """Load the tokenizer in a local folder (the kernel's ``AutoTokenizer`` resolves Hub ids to folders)."""
        for ignored in _files.HUB_ARGUMENTS:
            kwargs.pop(ignored, None)
        folder = Path(path)
        if folder.is_file() and folder.name == _files.TOKENIZER_FILE:
            return cls.from_files(
                {_files.TOKENIZER_FILE: _files.read_text(folder)}, name_or_path=str(path), **kwargs
            )
        files = _files.read_folder(folder)
        kwargs.setdefault("name_or_path", str(path))
        try:
            return cls.from_files(files, **kwargs)
        except (ConfigError, TypeError, ValueError, AttributeError, KeyError) as exc:
            if isinstance(exc, ConfigError) and str(folder) in str(exc):
                raise
            raise ConfigError(f"tokenizer files in {folder}: {type(exc).__name__}: {exc}") from exc

    @classmethod
    def from_files(cls, files: Mapping[str, Any], *init_inputs: Any, **kwargs: Any) -> PreTrainedTokenizerFast:
        """Build from in-memory contents.

        ``files`` maps ``"tokenizer.json"`` to its JSON text, ``"tokenizer_config.json"`` (and
        optionally ``"special_tokens_map.json"``, ``"config.json"``) to dicts, ``"chat_template.jinja"``
        to the template text, ``"vocab.txt"`` to its text. Keyword arguments override the config.
        """
        config = dict(_load_json_dict(files, _files.TOKENIZER_CONFIG_FILE))
        model_config = _load_json_dict(files, _files.MODEL_CONFIG_FILE)
        class_name = config.pop("tokenizer_class", None) or model_config.get("tokenizer_class")
        where = kwargs.get("name_or_path") or "<in-memory files>"
        if class_name is not None and not isinstance(class_name, str):
            raise ConfigError(
                f"{where}/{_files.TOKENIZER_CONFIG_FILE}: tokenizer_class={class_name!r} must be a class name string "
                "such as \"PreTrainedTokenizerFast\"; fix the file."
            )
        if not class_name and model_config.get("model_type") in MODEL_TYPE_CLASSES:
            class_name = MODEL_TYPE_CLASSES[model_config["model_type"]]
        if getattr(cls, "class_name", ""):  # BertTokenizer.from_pretrained(...): that class's behaviour, as asked
            class_name = cls.class_name
        config.pop("init_inputs", None)
        config.pop("auto_map", None)
        tokenizer_text = files.get(_files.TOKENIZER_FILE)
        vocab_text = files.get(_files.VOCAB_FILE)
        if tokenizer_text is None and vocab_text is None:
            raise FileMissingError(
                f"from_files needs {_files.TOKENIZER_FILE!r} (JSON text) or {_files.VOCAB_FILE!r}; got {sorted(files)}"
            )
        if isinstance(tokenizer_text, bytes):
            tokenizer_text = tokenizer_text.decode("utf-8")
        if tokenizer_text is not None and not isinstance(tokenizer_text, str):
            tokenizer_text = json.dumps(tokenizer_text)
        if tokenizer_text is None and not class_name:
            class_name = "BertTokenizer"

        parsed: dict[str, Any] | None = None
        if tokenizer_text is not None and class_name and class_name.removesuffix("Fast") in ("LlamaTokenizer",):
            parsed = _parse_tokenizer_json(tokenizer_text)
        profile = profile_for(class_name, parsed)

        if tokenizer_text is not None:
            config.pop("add_bos_token", None)
            config.pop("add_eos_token", None)
        templates = dict(files.get(_files.CHAT_TEMPLATE_DIR) or {})
        if files.get(_files.CHAT_TEMPLATE_FILE) is not None:
            templates["default"] = files[_files.CHAT_TEMPLATE_FILE]
        if list(templates) == ["default"]:
            config["chat_template"] = templates["default"]
        elif templates:
            config["chat_template"] = templates
        config.update(kwargs)
        if "additional_special_tokens" in config and not config.get("extra_special_tokens"):
            config["extra_special_tokens"] = config.pop("additional_special_tokens")
        if "added_tokens_decoder" not in config:
            for key, value in _load_json_dict(files, _files.SPECIAL_TOKENS_MAP_FILE).items():
                if kwargs.get(key):
                    continue
                if key in ("extra_special_tokens", "additional_special_tokens") and isinstance(value, list):
                    merged = list(config.get("extra_special_tokens") or [])
                    for token in value:
                        token = _as_added_token(token)
                        if str(token) not in {str(t) for t in merged}:
                            merged.append(token)
                    config["extra_special_tokens"] = merged
                else:
                    config[key] = _as_added_token(value)
        if tokenizer_text is not None or profile is not GENERIC:
            for key, value in profile.default_tokens.items():
                config.setdefault(key, value)
        elif tokenizer_text is None:
            config.setdefault("bos_token", "<s>")
            config.setdefault("eos_token", "</s>")

        if tokenizer_text is None:
            backend = bert_from_vocab(_files.parse_vocab_txt(vocab_text), config)
        elif profile.rebuilds:
            parsed = parsed if parsed is not None else _parse_tokenizer_json(tokenizer_text)
            if profile.edit_model is not None:
                profile.edit_model(parsed["model"], config)
            backend = _backend_from_json(json.dumps(parsed), where)
            if profile.set_pipeline is not None:
                profile.set_pipeline(backend, config)
        else:
            backend = _backend_from_json(tokenizer_text, where)
        target = cls
        if cls is PreTrainedTokenizerFast:  # AutoTokenizer: an instance of the class the config names, if one is here
            from .model_tokenizers import model_tokenizer_class

            target = model_tokenizer_class(class_name) or cls
        return target(tokenizer_object=backend, profile=profile, **config)

    # -- special tokens -----------------------------------------------------------------------
    def _token(self, name: str) -> str | None:
        value = self._special.get(name)
        return None if value is None else str(value)

    def _token_id(self, name: str) -> int | None:
        value = self._special.get(name)
        return None if value is None else self.convert_tokens_to_ids(str(value))

    def _set_token(self, name: str, value: Any) -> None:
        if value is not None and not isinstance(value, str | AddedToken):
            raise ConfigError(f"{name} must be a string or tokenizers.AddedToken, got {type(value).__name__}")
        self._special[name] = value

    def _set_token_id(self, name: str, value: int | None) -> None:
        self._special[name] = None if value is None else self.convert_ids_to_tokens(int(value))

    bos_token = _special_token("bos_token")
    eos_token = _special_token("eos_token")
    unk_token = _special_token("unk_token")
    sep_token = _special_token("sep_token")
    pad_token = _special_token("pad_token")
    cls_token = _special_token("cls_token")
    mask_token = _special_token("mask_token")
    bos_token_id = _special_token_id("bos_token")
    eos_token_id = _special_token_id("eos_token")
    unk_token_id = _special_token_id("unk_token")
    sep_token_id = _special_token_id("sep_token")
    pad_token_id = _special_token_id("pad_token")
    cls_token_id = _special_token_id("cls_token")
    mask_token_id = _special_token_id("mask_token")

    def __getattr__(self, name: str) -> Any:
        # Model-specific named tokens (e.g. ``image_token`` / ``image_token_id``) from the config.
        special = self.__dict__.get("_special")
        if special is not None:
            base = name.removesuffix("_id")
            if base in special and base not in SPECIAL_TOKENS_ATTRIBUTES:
                return self._token_id(base) if name.endswith("_id") else self._token(base)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    @property
    def extra_special_tokens(self) -> list[str]:
        return [str(t) for t in self._extra_special]

    @extra_special_tokens.setter
    def extra_special_tokens(self, value: Sequence[str | AddedToken] | None) -> None:
        self._extra_special = list(value or [])

    @property
    def extra_special_tokens_ids(self) -> list[int]:
        return self.convert_tokens_to_ids(self.extra_special_tokens)

    additional_special_tokens = extra_special_tokens
    additional_special_tokens_ids = extra_special_tokens_ids

    @property
    def pad_token_type_id(self) -> int:
        return self._pad_token_type_id

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """Named special tokens (``bos_token`` ...) as strings; extra tokens are in ``extra_special_tokens``."""
        return {name: str(self._special[name]) for name in self._special_names if self._special.get(name) is not None}

    @property
    def all_special_tokens(self) -> list[str]:
        seen: dict[str, None] = {}
        for value in [*(self._special[n] for n in self._special_names), *self._extra_special]:
            if value is not None:
                seen.setdefault(str(value))
        return list(seen)

    @property
    def all_special_ids(self) -> list[int]:
        return self.convert_tokens_to_ids(self.all_special_tokens)

    def add_special_tokens(
        self,
        special_tokens_dict: Mapping[str, str | AddedToken | Sequence[str | AddedToken]],
        replace_extra_special_tokens: bool = True,
    ) -> int:
        """Set named special tokens (``{"pad_token": "[PAD]"}``) and add them to the vocabulary if new."""
        if not special_tokens_dict:
            return 0
        tokens = dict(special_tokens_dict)
        if "additional_special_tokens" in tokens and not tokens.get("extra_special_tokens"):
            tokens["extra_special_tokens"] = tokens.pop("additional_special_tokens")
        to_add: list[AddedToken] = []
        for key, value in tokens.items():
            if key == "extra_special_tokens":
                if not isinstance(value, list | tuple) or not all(isinstance(t, str | AddedToken) for t in value):
                    raise ConfigError("add_special_tokens: extra_special_tokens must be a list of str or AddedToken")
                new = [
                    AddedToken(t, rstrip=False, lstrip=False, normalized=False, special=True)
                    if isinstance(t, str)
                    else t
                    for t in value
                    if replace_extra_special_tokens or str(t) not in self.extra_special_tokens
                ]
                if replace_extra_special_tokens and new:
                    self._extra_special = list(new)
                else:
                    self._extra_special.extend(new)
                to_add.extend(new)
                continue
            if key not in self._special_names:
                raise ConfigError(
                    f"add_special_tokens: {key!r} is not a special token name; use one of "
                    f"{[*self._special_names, 'extra_special_tokens']} (or add_tokens for plain new tokens)"
                )
            if not isinstance(value, str | AddedToken):
                raise ConfigError(f"add_special_tokens: {key} must be a str or AddedToken, got {type(value).__name__}")
            if isinstance(value, str):
                value = AddedToken(value, rstrip=False, lstrip=False, normalized=False, special=True)
            self._special[key] = value
            to_add.append(value)
        return self.add_tokens(to_add, special_tokens=True)

    def add_tokens(
        self, new_tokens: str | AddedToken | Sequence[str | AddedToken], special_tokens: bool = False
    ) -> int:
        """Add tokens that are not yet in the vocabulary; returns how many were added."""
        if not new_tokens:
            return 0
        if not isinstance(new_tokens, list | tuple):
            new_tokens = [new_tokens]
        for token in new_tokens:
            if not isinstance(token, str | AddedToken):
                raise ConfigError(
                    f"add_tokens: tokens must be str or tokenizers.AddedToken, got {type(token).__name__}"
                )
        if special_tokens:
            return self._tokenizer.add_special_tokens(list(new_tokens))
        return self._tokenizer.add_tokens(list(new_tokens))

    # -- vocabulary ---------------------------------------------------------------------------
    @property
    def backend_tokenizer(self) -> Tokenizer:
        """The ``tokenizers.Tokenizer`` doing the work."""
        return self._tokenizer

    @property
    def decoder(self) -> Any:
        return self._tokenizer.decoder

    @property
    def is_fast(self) -> bool:
        return True

    @property
    def vocab_size(self) -> int:
        """Size of the base vocabulary, without added tokens."""
        return self._tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def __bool__(self) -> bool:
        return True

    def get_vocab(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    @property
    def vocab(self) -> dict[str, int]:
        return self.get_vocab()

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        return self._tokenizer.get_added_tokens_decoder()

    @property
    def added_tokens_encoder(self) -> dict[str, int]:
        return {t.content: i for i, t in sorted(self.added_tokens_decoder.items())}

    def get_added_vocab(self) -> dict[str, int]:
        return self.added_tokens_encoder

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int] | None:
        """Token string(s) to id(s); unknown tokens map to ``unk_token_id``."""
        if isinstance(tokens, str):
            index = self._tokenizer.token_to_id(tokens)
            return index if index is not None else self.unk_token_id
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def convert_ids_to_tokens(
        self, ids: int | Sequence[int], skip_special_tokens: bool = False
    ) -> str | list[str] | None:
        """Id(s) to token string(s)."""
        ids = to_python(ids)
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._tokenizer.id_to_token(int(i)) for i in ids if int(i) not in skip]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        decoder = self._tokenizer.decoder
        return decoder.decode(tokens) if decoder is not None else " ".join(tokens)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return self._tokenizer.num_special_tokens_to_add(pair)

    @property
    def max_len_single_sentence(self) -> int:
        return self.model_max_length - self.num_special_tokens_to_add(pair=False)

    @property
    def max_len_sentences_pair(self) -> int:
        return self.model_max_length - self.num_special_tokens_to_add(pair=True)

    def get_special_tokens_mask(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None, already_has_special_tokens: bool = False
    ) -> list[int]:
        """1 for special tokens, 0 otherwise, for ids that already contain special tokens."""
        if already_has_special_tokens:
            if token_ids_1 is not None:
                raise ConfigError("get_special_tokens_mask: pass token_ids_1=None when already_has_special_tokens=True")
            special = set(self.all_special_ids)
            return [1 if int(i) in special else 0 for i in token_ids_0]
        raise ConfigError(
            "get_special_tokens_mask needs already_has_special_tokens=True here; to get the mask while encoding, "
            "call the tokenizer with return_special_tokens_mask=True."
        )

    def __repr__(self) -> str:
        added = "".join(f"\n\t{i}: {t!r}," for i, t in self.added_tokens_decoder.items())
        return (
            f"{type(self).__name__}(name_or_path='{self.name_or_path}', vocab_size={self.vocab_size}, "
            f"model_max_length={self.model_max_length}, padding_side='{self.padding_side}', "
            f"truncation_side='{self.truncation_side}', special_tokens={self.special_tokens_map}, "
            f"added_tokens_decoder={{{added}{chr(10) if added else ''}}})"
        )

    # -- encoding -----------------------------------------------------------------------------
    def _strategies(
        self,
        padding: bool | str | Any,
        truncation: bool | str | Any | None,
        max_length: int | None,
        pad_to_multiple_of: int | None,
        verbose: bool = True,
    ) -> tuple[str, str, int | None]:
        if max_length is not None and padding is False and truncation is None:
            truncation = "longest_first"
        padding = getattr(padding, "value", padding)
        truncation = getattr(truncation, "value", truncation)
        if padding is True:
            if verbose and max_length is not None and truncation in (None, False, "do_not_truncate"):
                warnings.warn(
                    "`max_length` is ignored when `padding`=`True` and there is no truncation strategy. "
                    "To pad to max length, use `padding='max_length'`.",
                    stacklevel=3,
                )
            pad = "longest"
        elif padding is False or padding is None:
            pad = "do_not_pad"
        elif padding in PADDING_STRATEGIES:
            pad = padding
        else:
            raise ConfigError(
                f"padding={padding!r} is not valid: use True/'longest', 'max_length', or False/'do_not_pad'"
            )
        if truncation is True:
            trunc = "longest_first"
        elif truncation is False or truncation is None:
            trunc = "do_not_truncate"
        elif truncation in TRUNCATION_STRATEGIES:
            trunc = truncation
        else:
            raise ConfigError(
                f"truncation={truncation!r} is not valid: use True/'longest_first', 'only_first', 'only_second', "
                "or False/'do_not_truncate'"
            )
        if max_length is None:
            if pad == "max_length":
                if self.model_max_length > LARGE_INTEGER:
                    pad = "do_not_pad"
                else:
                    max_length = self.model_max_length
            if trunc != "do_not_truncate":
                if self.model_max_length > LARGE_INTEGER:
                    trunc = "do_not_truncate"
                else:
                    max_length = self.model_max_length
        if pad != "do_not_pad":
            pad_id = self.pad_token_id
            if self.pad_token is None or pad_id is None or pad_id < 0:
                raise ConfigError(
                    "asked to pad but the tokenizer has no padding token. Set one, e.g. "
                    "tokenizer.pad_token = tokenizer.eos_token, or tokenizer.add_special_tokens({'pad_token': '[PAD]'})."
                )
        if (
            trunc != "do_not_truncate"
            and pad != "do_not_pad"
            and pad_to_multiple_of is not None
            and max_length is not None
            and max_length % pad_to_multiple_of != 0
        ):
            raise ConfigError(
                f"truncation and padding are both on but max_length ({max_length}) is not a multiple of "
                f"pad_to_multiple_of ({pad_to_multiple_of}); choose a max_length that is."
            )
        return pad, trunc, max_length

    def _configure_backend(
        self,
        pad: str,
        trunc: str,
        max_length: int | None,
        stride: int,
        pad_to_multiple_of: int | None,
        padding_side: str | None,
    ) -> None:
        backend = self._tokenizer
        current_trunc = backend.truncation
        if trunc == "do_not_truncate":
            if current_trunc is not None:
                backend.no_truncation()
        else:
            if max_length is None:
                raise ConfigError("truncation needs max_length (the tokenizer config has no model_max_length)")
            target = {"max_length": max_length, "stride": stride, "strategy": trunc, "direction": self.truncation_side}
            if current_trunc is None or {k: current_trunc.get(k) for k in target} != target:
                backend.enable_truncation(**target)
        current_pad = backend.padding
        if pad == "do_not_pad":
            if current_pad is not None:
                backend.no_padding()
        else:
            side = padding_side if padding_side is not None else self.padding_side
            if side not in ("left", "right"):
                raise ConfigError(f"padding_side must be 'left' or 'right', got {side!r}")
            target = {
                "length": max_length if pad == "max_length" else None,
                "direction": side,
                "pad_id": self.pad_token_id,
                "pad_token": self.pad_token,
                "pad_type_id": self.pad_token_type_id,
                "pad_to_multiple_of": pad_to_multiple_of,
            }
            if current_pad != target:
                backend.enable_padding(**target)

    def __call__(
        self,
        text: Any = None,
        text_pair: Any = None,
        text_target: Any = None,
        text_pair_target: Any = None,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        tokenizer_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> BatchEncoding:
        """Tokenize one text, a batch of texts, or (batches of) text pairs."""
        options: dict[str, Any] = {
            "add_special_tokens": add_special_tokens,
            "padding": padding,
            "truncation": truncation,
            "max_length": max_length,
            "stride": stride,
            "is_split_into_words": is_split_into_words,
            "pad_to_multiple_of": pad_to_multiple_of,
            "padding_side": padding_side,
            "return_tensors": return_tensors,
            "return_token_type_ids": return_token_type_ids,
            "return_attention_mask": return_attention_mask,
            "return_overflowing_tokens": return_overflowing_tokens,
            "return_special_tokens_mask": return_special_tokens_mask,
            "return_offsets_mapping": return_offsets_mapping,
            "return_length": return_length,
            "split_special_tokens": kwargs.pop("split_special_tokens", self.split_special_tokens),
            "verbose": verbose,
        }
        max_target_length = kwargs.pop("max_target_length", None)
        if tokenizer_kwargs:
            options.update(tokenizer_kwargs)
        unknown = set(kwargs) - {"return_dict"}
        if unknown:
            raise ConfigError(f"unknown tokenizer argument(s) {sorted(unknown)}; see the tokenizer __call__ signature")
        if text is None and text_target is None:
            raise ConfigError("pass text (or text_target) to the tokenizer")
        pad, trunc, max_len = self._strategies(
            options.pop("padding"),
            options.pop("truncation"),
            options.pop("max_length"),
            options["pad_to_multiple_of"],
            options["verbose"],
        )
        encodings = None
        if text is not None:
            encodings = self._encode(text, text_pair, pad, trunc, max_len, **options)
        if text_target is None:
            return encodings
        target_len = max_target_length if max_target_length is not None else max_len
        targets = self._encode(text_target, text_pair_target, pad, trunc, target_len, **options)
        if encodings is None:
            return targets
        encodings["labels"] = targets["input_ids"]
        return encodings

    def _encode(
        self,
        text: Any,
        text_pair: Any,
        pad: str,
        trunc: str,
        max_length: int | None,
        *,
        add_special_tokens: bool = True,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        split_special_tokens: bool | None = None,
    ) -> BatchEncoding:
        tensor_type = check_tensor_type(return_tensors)
        for name, value in (("text", text), ("text_pair", text_pair)):
            if value is not None and not _is_text_input(value):
                raise ConfigError(
                    f"{name} must be a str, a list of str (a batch, or one pre-tokenized text with "
                    f"is_split_into_words=True), a list of (text, text_pair) pairs, or a list of lists of str; "
                    f"got {type(value).__name__}"
                )
        if is_split_into_words:
            batched = isinstance(text, list | tuple) and bool(text) and isinstance(text[0], list | tuple)
        else:
            batched = isinstance(text, list | tuple)
        if batched:
            if isinstance(text_pair, str):
                raise ConfigError("when text is a batch, text_pair must be a list of the same length, not a str")
            if text_pair is not None and len(text) != len(text_pair):
                raise ConfigError(
                    f"text has {len(text)} items but text_pair has {len(text_pair)}; give one pair per text"
                )
            inputs = list(zip(text, text_pair)) if text_pair is not None else text
        else:
            inputs = [(text, text_pair)] if text_pair else [text]

        self._configure_backend(pad, trunc, max_length, stride, pad_to_multiple_of, padding_side)
        split = self.split_special_tokens if split_special_tokens is None else split_special_tokens
        if self._tokenizer.encode_special_tokens != split:
            self._tokenizer.encode_special_tokens = split
        try:
            encodings = self._tokenizer.encode_batch(
                inputs, add_special_tokens=add_special_tokens, is_pretokenized=is_split_into_words
            )
        except BaseException as exc:
            if not _is_rust_error(exc):
                raise
            raise ConfigError(
                f"tokenization failed: {exc}. Check truncation (e.g. 'only_second' needs text pairs, and max_length "
                f"must leave room for the special tokens) and the input types, or the tokenizer files in "
                f"{self.name_or_path or 'memory'}."
            ) from exc

        if return_token_type_ids is None:
            return_token_type_ids = "token_type_ids" in self.model_input_names
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        if return_overflowing_tokens:
            rows: list[Encoding] = []
            sample_map: list[int] = []
            for index, encoding in enumerate(encodings):
                group = [encoding, *encoding.overflowing]
                rows.extend(group)
                sample_map.extend([index] * len(group))
        else:
            rows = encodings
        data: dict[str, Any] = {"input_ids": [e.ids for e in rows]}
        if return_token_type_ids:
            data["token_type_ids"] = [e.type_ids for e in rows]
        if return_attention_mask:
            data["attention_mask"] = [e.attention_mask for e in rows]
        if return_special_tokens_mask:
            data["special_tokens_mask"] = [e.special_tokens_mask for e in rows]
        if return_offsets_mapping:
            data["offset_mapping"] = [e.offsets for e in rows]
        if return_length:
            data["length"] = [len(e.ids) for e in rows]
        if return_overflowing_tokens:
            data["overflow_to_sample_mapping"] = sample_map
        if max_length is None and verbose and not self._warned_too_long and self.model_max_length:
            if any(len(ids) > self.model_max_length for ids in data["input_ids"]):
                self._warned_too_long = True
                logger.warning(
                    "Token indices sequence length is longer than the specified maximum sequence length for this "
                    "model (> %d). Running this sequence through the model will result in indexing errors",
                    self.model_max_length,
                )
        if not batched and tensor_type is None and not return_overflowing_tokens:
            data = {k: (v[0] if v and isinstance(v[0], list) else v) for k, v in data.items()}
        return BatchEncoding(data, rows, tensor_type=tensor_type)

    def encode(
        self,
        text: Any,
        text_pair: Any = None,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """The ``input_ids`` of ``text`` (and ``text_pair``)."""
        return self(
            text,
            text_pair=text_pair,
            add_special_tokens=add_special_tokens,
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            stride=stride,
            padding_side=padding_side,
            return_tensors=return_tensors,
            **kwargs,
        )["input_ids"]

    def tokenize(
        self, text: str, pair: str | None = None, add_special_tokens: bool = False, **kwargs: Any
    ) -> list[str]:
        """The token strings of ``text`` (no special tokens unless asked)."""
        return self(text, text_pair=pair, add_special_tokens=add_special_tokens, **kwargs).tokens()

    def pad(
        self,
        encoded_inputs: Any,
        padding: bool | str = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | None = None,
        verbose: bool = True,
    ) -> BatchEncoding:
        """Pad already-encoded inputs (a dict of lists, or a list of dicts) to a common length."""
        if isinstance(encoded_inputs, list | tuple) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
            encoded_inputs = {key: [example[key] for example in encoded_inputs] for key in encoded_inputs[0]}
        main = self.model_input_names[0]
        if main not in encoded_inputs:
            raise ConfigError(f"pad() needs '{main}' in the inputs; got keys {list(encoded_inputs)}")
        inferred = None
        values = {k: to_python(v) for k, v in encoded_inputs.items()}
        first = encoded_inputs[main]
        if first is not None and len(first) and not isinstance(first[0], int | list | tuple):
            inferred = "pt" if type(first[0]).__module__.startswith("torch") else "np"
        return_tensors = return_tensors if return_tensors is not None else inferred
        pad, _, max_length = self._strategies(padding, None, max_length, None, verbose)
        required = values[main]
        if not required:
            if return_attention_mask:
                values["attention_mask"] = []
            return BatchEncoding(values)
        single = not isinstance(required[0], list | tuple)
        batch = {k: [v] for k, v in values.items()} if single else values
        if pad == "longest":
            max_length = max(len(x) for x in batch[main])
            pad = "max_length"
        out: dict[str, list[Any]] = {}
        for row in range(len(batch[main])):
            padded = self._pad_row(
                {k: list(v[row]) for k, v in batch.items()},
                pad,
                max_length,
                pad_to_multiple_of,
                padding_side,
                return_attention_mask,
            )
            for key, value in padded.items():
                out.setdefault(key, []).append(value)
        if single:
            out = {k: v[0] for k, v in out.items()}
        return BatchEncoding(out, tensor_type=return_tensors)

    def _pad_row(
        self,
        row: dict[str, list[int]],
        pad: str,
        max_length: int | None,
        pad_to_multiple_of: int | None,
        padding_side: str | None,
        return_attention_mask: bool | None,
    ) -> dict[str, list[int]]:
        main = self.model_input_names[0]
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        ids = row[main]
        if pad == "longest":
            max_length = len(ids)
        if max_length is not None and pad_to_multiple_of is not None and max_length % pad_to_multiple_of:
            max_length = (max_length // pad_to_multiple_of + 1) * pad_to_multiple_of
        if return_attention_mask and "attention_mask" not in row:
            row["attention_mask"] = [1] * len(ids)
        if pad == "do_not_pad" or max_length is None or len(ids) >= max_length:
            return row
        missing = max_length - len(ids)
        side = padding_side if padding_side is not None else self.padding_side
        fill = {
            "attention_mask": 0,
            "token_type_ids": self.pad_token_type_id,
            "special_tokens_mask": 1,
            main: self.pad_token_id,
        }
        for key, value in fill.items():
            if key in row and (key != "attention_mask" or return_attention_mask):
                row[key] = row[key] + [value] * missing if side == "right" else [value] * missing + row[key]
        return row

    # -- decoding -----------------------------------------------------------------------------
    def _cleanup(self, text: str, clean_up_tokenization_spaces: bool | None) -> str:
        clean = (
            self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        if not clean:
            return text
        if (
            type(self._tokenizer.model).__name__ == "BPE"
            and not self.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output
        ):
            # The cleanup was designed for WordPiece and would delete real spaces in BPE output.
            return text
        return self.clean_up_tokenization(text)

    @staticmethod
    def clean_up_tokenization(text: str) -> str:
        """Remove spaces before punctuation and English contractions (WordPiece output)."""
        for before, after in _CLEANUPS:
            text = text.replace(before, after)
        return text

    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> str | list[str]:
        """Ids to text; a batch (list of lists, 2-D tensor) gives a list of texts."""
        token_ids = to_python(token_ids)
        if isinstance(token_ids, Mapping):
            token_ids = token_ids["input_ids"]
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if token_ids and isinstance(token_ids[0], list | tuple):
            texts = self._tokenizer.decode_batch([list(t) for t in token_ids], skip_special_tokens=skip_special_tokens)
            return [self._cleanup(t, clean_up_tokenization_spaces) for t in texts]
        text = self._tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)
        return self._cleanup(text, clean_up_tokenization_spaces)

    def batch_decode(
        self,
        sequences: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Decode every sequence of a batch."""
        result = self.decode(sequences, skip_special_tokens, clean_up_tokenization_spaces, **kwargs)
        return [result] if isinstance(result, str) else result

    # -- chat templates -----------------------------------------------------------------------
    def get_chat_template(self, chat_template: str | None = None, tools: list[Any] | None = None) -> str:
        """The template source to use: a named template, the given source, or the tokenizer's own."""
        if isinstance(self.chat_template, dict):
            templates = self.chat_template
            if chat_template is not None and chat_template in templates:
                return templates[chat_template]
            if chat_template is None:
                if tools is not None and "tool_use" in templates:
                    return templates["tool_use"]
                if "default" in templates:
                    return templates["default"]
                raise ConfigError(
                    f"this tokenizer has several chat templates and no default; pass chat_template= one of {sorted(templates)}"
                )
            return chat_template
        if chat_template is not None:
            return chat_template
        if self.chat_template is None:
            raise ConfigError(
                "this tokenizer has no chat template (none in tokenizer_config.json or chat_template.jinja); set "
                "tokenizer.chat_template = '...' or pass chat_template= to apply_chat_template."
            )
        return self.chat_template

    def _chat_template_name(self, chat_template: str | None, source: str) -> str:
        """How errors name the template: which one, of which tokenizer."""
        owner = f"of {self.name_or_path}" if self.name_or_path else "of this tokenizer"
        if isinstance(self.chat_template, dict):
            named = next((k for k, v in self.chat_template.items() if v == source), None)
            if named is not None:
                return f"the chat template '{named}' {owner}"
        if chat_template is not None and source == chat_template:
            return "the chat template passed as chat_template="
        return f"the chat template {owner}"

    def apply_chat_template(
        self,
        conversation: Any,
        tools: list[Any] | None = None,
        documents: list[dict[str, Any]] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        tokenize: bool = True,
        sanitize_control_tokens: bool = False,
        padding: bool | str = False,
        truncation: bool = False,
        max_length: int | None = None,
        return_tensors: str | None = None,
        return_dict: bool = True,
        return_assistant_tokens_mask: bool = False,
        tokenizer_kwargs: dict[str, Any] | None = None,
        **template_kwargs: Any,
    ) -> Any:
        """Render a conversation (or a batch of them) with the chat template, and tokenize it unless told not to."""
        if sanitize_control_tokens or return_assistant_tokens_mask:
            raise ConfigError(
                "apply_chat_template: sanitize_control_tokens and return_assistant_tokens_mask are not supported by "
                "microformers-tokenizers yet; leave them False."
            )
        template = self.get_chat_template(chat_template, tools)
        if isinstance(conversation, list | tuple) and not conversation:
            raise ConfigError("apply_chat_template: the conversation is empty; pass at least one message.")
        batched = isinstance(conversation, list | tuple) and (
            isinstance(conversation[0], list | tuple) or hasattr(conversation[0], "messages")
        )
        conversations = conversation if batched else [conversation]
        conversations = [
            [{k: v for k, v in message.items() if v is not None} for message in getattr(chat, "messages", chat)]
            for chat in conversations
        ]
        variables = {**self.special_tokens_map, **template_kwargs}
        rendered = render_chat_template(
            template,
            conversations,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            template_name=self._chat_template_name(chat_template, template),
            **variables,
        )
        text: Any = rendered if batched else rendered[0]
        if not tokenize:
            return text
        out = self(
            text,
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            add_special_tokens=False,
            return_tensors=return_tensors,
            **(tokenizer_kwargs or {}),
        )
        return out if return_dict else out["input_ids"]

    # -- saving -------------------------------------------------------------------------------
    def push_to_hub(self, *args: Any, **kwargs: Any) -> None:
        refuse_push_to_hub(True)

    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        legacy_format: bool | None = None,
        filename_prefix: str | None = None,
        push_to_hub: bool = False,
        **kwargs: Any,
    ) -> tuple[str, ...]:
        """Write ``tokenizer.json``, ``tokenizer_config.json`` (and ``chat_template.jinja``) to a folder.

        The folder is swapped atomically for a staged copy holding the new files and the folder's other
        files, so a failure or a killed process leaves the old or the new tokenizer, never a mix.
        """
        refuse_push_to_hub(push_to_hub)
        folder = Path(save_directory)
        if folder.is_file():
            raise ConfigError(f"save_pretrained: {str(folder)!r} is a file; pass a directory.")
        folder.mkdir(parents=True, exist_ok=True)
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        contents: dict[str, str] = {}
        config = self._config_to_save()
        if kwargs.get("save_jinja_files", True):
            if isinstance(self.chat_template, str):
                contents[prefix + _files.CHAT_TEMPLATE_FILE] = self.chat_template
            elif isinstance(self.chat_template, dict):
                for name, source in self.chat_template.items():
                    if name == "default":
                        contents[prefix + _files.CHAT_TEMPLATE_FILE] = source
                    else:
                        if "/" in name or "\\" in name or name.startswith("."):
                            raise ConfigError(f"save_pretrained: invalid chat template name {name!r}")
                        contents[f"{prefix}{_files.CHAT_TEMPLATE_DIR}/{name}.jinja"] = source
        elif isinstance(self.chat_template, dict):
            config["chat_template"] = [{"name": k, "template": v} for k, v in self.chat_template.items()]
        elif self.chat_template is not None:
            config["chat_template"] = self.chat_template
        contents[prefix + _files.TOKENIZER_CONFIG_FILE] = (
            json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        )
        contents[prefix + _files.TOKENIZER_FILE] = self._tokenizer.to_str(pretty=True)
        if type(self._tokenizer.model).__name__ == "WordPiece":
            vocab = self._tokenizer.get_vocab(with_added_tokens=False)
            contents[prefix + _files.VOCAB_FILE] = "".join(
                t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])
            )
        return tuple(str(p) for p in _write_all(folder, contents))

    def _config_to_save(self) -> dict[str, Any]:
        config = {k: v for k, v in copy.deepcopy(self.init_kwargs).items() if k not in _NOT_SAVED}
        for key in list(config):
            if key in SPECIAL_TOKENS_ATTRIBUTES or key in ("extra_special_tokens", "model_specific_special_tokens"):
                config.pop(key)
        config.update(
            model_max_length=self.model_max_length,
            padding_side=self.padding_side,
            truncation_side=self.truncation_side,
            clean_up_tokenization_spaces=self.clean_up_tokenization_spaces,
            model_input_names=list(self.model_input_names),
        )
        if self.split_special_tokens:
            config["split_special_tokens"] = True
        config.update(self.special_tokens_map)
        if self._extra_special:
            config["extra_special_tokens"] = self.extra_special_tokens
        config["tokenizer_class"] = self._profile.name
        config["backend"] = "tokenizers"
        for key, value in list(config.items()):
            if isinstance(value, AddedToken):
                config[key] = {"__type": "AddedToken", **_token_state(value)}
        return config


TokenizersBackend = PreTrainedTokenizerFast


def _load_json_dict(files: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = files.get(name)
    if value is None:
        return {}
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{name} is not valid JSON ({exc}); re-save the tokenizer.") from exc
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must be a JSON object, got {type(value).__name__}")
    return dict(value)


def _parse_tokenizer_json(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"tokenizer.json is not valid JSON ({exc}); re-download or re-save the tokenizer.") from exc
    if not isinstance(parsed, dict) or not isinstance(parsed.get("model"), dict):
        raise ConfigError("tokenizer.json has no 'model' section; it is not a tokenizers-library file.")
    return parsed


def _is_rust_error(exc: BaseException) -> bool:
    """The Rust side raises plain Exception, and panics as pyo3's PanicException (a BaseException)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _backend_from_json(text: str, where: str = "<in-memory files>") -> Tokenizer:
    try:
        return Tokenizer.from_str(text)
    except BaseException as exc:
        if not _is_rust_error(exc):
            raise
        raise ConfigError(
            f"{where}/tokenizer.json could not be read by the tokenizers library ({exc}); re-download or re-save "
            "it, or upgrade the tokenizers package if the file comes from a newer version."
        ) from exc


def _write_all(folder: Path, contents: Mapping[str, str]) -> list[Path]:
    """Write the files into a staging copy of ``folder`` and swap it in atomically (the kernel's ``staged_folder``)."""
    from microformers.hub import staged_folder

    blocked = [str(folder / name) for name in contents if (folder / name).is_dir()]
    if blocked:
        raise ConfigError(f"save_pretrained cannot write {blocked}: a directory has that name; remove it first.")
    with staged_folder(folder) as staging:
        for name, text in contents.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(text, encoding="utf-8")
    return [folder / name for name in contents]

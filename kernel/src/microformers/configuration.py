"""``PretrainedConfig``: a model's ``config.json`` as an object.

Every key of the file becomes an attribute, known or not, and is written back on save, so a
config survives a round trip through microformers unchanged (``auto_map`` and vendor keys included).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from pathlib import Path
from typing import Any, ClassVar

from .errors import ConfigError
from .hub import atomic_write_text, resolve_file, split_hub_kwargs
from .remote import RegisterForAutoClass, write_custom_code

CONFIG_NAME = "config.json"


def torchscript_setting(value: Any) -> bool:
    """``torchscript=``, checked: a bool. True makes models return tuples (``return_dict`` false) and clone tied
    embeddings instead of sharing them, as the reference's TorchScript mode does, so ``torch.jit.trace`` works."""
    if not isinstance(value, bool):
        raise ConfigError(
            f"torchscript={value!r:.60} must be true or false (true: tuples out and untied embeddings, for "
            "torch.jit.trace); pass a bool"
        )
    return value


def refuse_push_to_hub(push_to_hub: Any, argument: str = "push_to_hub") -> None:
    """Uploading is not built in: a true ``push_to_hub`` raises, saying how to upload instead."""
    if push_to_hub:
        raise ConfigError(
            f"{argument}=True: microformers does not upload to the Hub. Save with save_pretrained(folder), then "
            "upload that folder with huggingface_hub (HfApi().upload_folder(folder_path=folder, repo_id=...))."
        )


def config_file(pretrained: str | os.PathLike[str], hub_kwargs: dict[str, Any]) -> Path:
    """A path to a ``.json`` file is the config itself; anything else is a folder or repo holding config.json."""
    path = Path(str(pretrained)).expanduser()
    if path.suffix == ".json" and path.is_file():
        return path
    return resolve_file(pretrained, CONFIG_NAME, **hub_kwargs)  # type: ignore[return-value]


def dtype_name(dtype: Any) -> str | None:
    """``torch.float16`` / ``"torch.float16"`` / ``"float16"`` -> ``"float16"``."""
    if dtype is None:
        return None
    name = str(dtype).removeprefix("torch.")
    return name


class PretrainedConfig(RegisterForAutoClass):
    """Base class of model configurations; subclasses set ``model_type`` and their defaults."""

    model_type: ClassVar[str] = ""
    # Alternative names of attributes (``{"n_embd": "hidden_size"}`` reads ``config.hidden_size``).
    attribute_map: ClassVar[dict[str, str]] = {}
    # Keys a subclass never serialises.
    _transient_keys: ClassVar[tuple[str, ...]] = ("_name_or_path", "_attn_implementation_internal", "_commit_hash")

    def __init__(self, **kwargs: Any) -> None:
        self.torchscript = kwargs.pop("torchscript", False)
        # the reference's TorchScript mode returns tuples whatever return_dict says (its use_return_dict)
        self.return_dict: bool = kwargs.pop("return_dict", True) and not self.torchscript
        self.output_hidden_states: bool = kwargs.pop("output_hidden_states", False)
        self.output_attentions: bool = kwargs.pop("output_attentions", False)
        dtype = kwargs.pop("dtype", None)
        torch_dtype = kwargs.pop("torch_dtype", None)
        self.dtype = dtype_name(dtype if dtype is not None else torch_dtype)
        self.architectures: list[str] | None = kwargs.pop("architectures", None)
        self.bos_token_id: int | None = kwargs.pop("bos_token_id", None)
        self.eos_token_id: int | list[int] | None = kwargs.pop("eos_token_id", None)
        self.pad_token_id: int | None = kwargs.pop("pad_token_id", None)
        self.sep_token_id: int | None = kwargs.pop("sep_token_id", None)
        self.decoder_start_token_id: int | None = kwargs.pop("decoder_start_token_id", None)
        self.tie_word_embeddings: bool = kwargs.pop("tie_word_embeddings", True)
        self.is_encoder_decoder: bool = kwargs.pop("is_encoder_decoder", False)
        self.is_decoder: bool = kwargs.pop("is_decoder", False)
        self.problem_type: str | None = kwargs.pop("problem_type", None)
        self._attn_implementation_internal: str | None = kwargs.pop("attn_implementation", None)
        self._name_or_path: str = str(kwargs.pop("name_or_path", kwargs.pop("_name_or_path", "")))
        id2label = kwargs.pop("id2label", None)
        label2id = kwargs.pop("label2id", None)
        num_labels = kwargs.pop("num_labels", None)
        if id2label is not None:
            self.id2label = {int(k): v for k, v in id2label.items()}
        elif num_labels is not None:
            self.id2label = {i: f"LABEL_{i}" for i in range(int(num_labels))}
        else:
            self.id2label = {0: "LABEL_0", 1: "LABEL_1"}
        if num_labels is not None and len(self.id2label) != int(num_labels):
            self.id2label = {i: f"LABEL_{i}" for i in range(int(num_labels))}
        self.label2id = (
            {k: int(v) for k, v in label2id.items()} if label2id else {v: k for k, v in self.id2label.items()}
        )
        kwargs.pop("model_type", None)
        kwargs.pop("transformers_version", None)
        for key, value in kwargs.items():
            if key.startswith("__") or callable(getattr(type(self), key, None)):
                raise ConfigError(f"config key '{key}' is reserved: it names a method of {type(self).__name__}")
            try:
                setattr(self, key, value)
            except AttributeError as exc:
                raise ConfigError(f"cannot set config attribute '{key}' of {type(self).__name__}: {exc}") from exc

    # -- attribute aliases -----------------------------------------------------------------------
    def __setattr__(self, key: str, value: Any) -> None:
        key = type(self).attribute_map.get(key, key)
        super().__setattr__(key, value)

    def __getattr__(self, key: str) -> Any:
        # Only called when normal lookup fails.
        mapped = type(self).attribute_map.get(key)
        if mapped is not None:
            return getattr(self, mapped)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{key}'")

    # -- derived properties -----------------------------------------------------------------------
    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @num_labels.setter
    def num_labels(self, value: int) -> None:
        if len(self.id2label) != value:
            self.id2label = {i: f"LABEL_{i}" for i in range(value)}
            self.label2id = {v: k for k, v in self.id2label.items()}

    @property
    def torchscript(self) -> bool:
        """TorchScript mode (``torch.jit.trace``): models return tuples and clone tied embeddings."""
        return self.__dict__.get("torchscript", False)

    @torchscript.setter
    def torchscript(self, value: bool) -> None:
        # kept (and so written to config.json) only when true, as the reference's config.json has it
        if torchscript_setting(value):
            self.__dict__["torchscript"] = True
            self.return_dict = False  # set after construction too (from_pretrained(..., torchscript=True))
        else:
            self.__dict__.pop("torchscript", None)

    @property
    def use_return_dict(self) -> bool:
        return self.return_dict and not self.torchscript

    @property
    def name_or_path(self) -> str:
        return self._name_or_path

    @name_or_path.setter
    def name_or_path(self, value: str) -> None:
        self._name_or_path = str(value)

    @property
    def _attn_implementation(self) -> str:
        return self._attn_implementation_internal or "sdpa"

    @_attn_implementation.setter
    def _attn_implementation(self, value: str | None) -> None:
        self._attn_implementation_internal = value

    @property
    def torch_dtype(self) -> str | None:
        return self.dtype

    @torch_dtype.setter
    def torch_dtype(self, value: Any) -> None:
        self.dtype = dtype_name(value)

    # -- serialisation ------------------------------------------------------------------------------
    @classmethod
    def register_for_auto_class(cls, auto_class: str = "AutoConfig") -> None:
        super().register_for_auto_class(auto_class)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if key in self._transient_keys:
                continue
            out[key] = copy.deepcopy(value)
        out["dtype"] = dtype_name(self.dtype)
        if self.model_type:
            out["model_type"] = self.model_type
        out["id2label"] = {str(k): v for k, v in self.id2label.items()}
        for key, value in list(out.items()):
            if isinstance(value, PretrainedConfig):
                out[key] = value.to_dict()
        return out

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_diff_dict(self) -> dict[str, Any]:
        """Only the keys that differ from this class's defaults (plus model_type)."""
        defaults = type(self)().to_dict()
        diff = {k: v for k, v in self.to_dict().items() if k not in defaults or defaults[k] != v}
        if self.model_type:
            diff["model_type"] = self.model_type
        return diff

    def update(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            setattr(self, key, value)

    def save_pretrained(self, save_directory: str | os.PathLike[str], push_to_hub: bool = False, **_: Any) -> None:
        refuse_push_to_hub(push_to_hub)
        folder = Path(save_directory)
        if folder.is_file():
            raise ConfigError(f"save_pretrained: {folder} is a file; pass a folder to write config.json into")
        folder.mkdir(parents=True, exist_ok=True)
        write_custom_code(self, self, folder)
        atomic_write_text(folder / CONFIG_NAME, self.to_json_string())

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> PretrainedConfig:
        merged = {**config_dict, **kwargs}
        return cls(**merged)

    @classmethod
    def get_config_dict(cls, pretrained: str | os.PathLike[str], **kwargs: Any) -> dict[str, Any]:
        hub_kwargs, _ = split_hub_kwargs(kwargs)
        return read_json(config_file(pretrained, hub_kwargs), what="model configuration")

    @classmethod
    def from_pretrained(cls, pretrained: str | os.PathLike[str], **kwargs: Any) -> PretrainedConfig:
        hub_kwargs, overrides = split_hub_kwargs(kwargs)
        overrides.pop("trust_remote_code", None)
        config_dict = cls.get_config_dict(pretrained, **hub_kwargs)
        file_type = config_dict.get("model_type")
        if cls.model_type and file_type and file_type != cls.model_type:
            raise ConfigError(
                f"{pretrained}/config.json has model_type '{file_type}', but {cls.__name__} is for "
                f"'{cls.model_type}'; load it with AutoConfig instead"
            )
        config = config_from_dict(cls, config_dict, getattr(config_dict, "source", pretrained), overrides)
        config.name_or_path = str(pretrained)
        return config

    def push_to_hub(self, *args: Any, **kwargs: Any) -> None:
        refuse_push_to_hub(True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PretrainedConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__} {self.to_json_string()}"


PreTrainedConfig = PretrainedConfig


class ConfigDict(dict):  # type: ignore[type-arg]
    """A ``dict`` read from a file, remembering the file (``.source``) for error messages."""

    source: str = ""


MAX_JSON_DEPTH = 64
MAX_LABELS = 1_000_000
# an auto_map reference: [owner/repo--]module[.submodule].ClassName (module files of the folder, no paths)
_AUTO_MAP_REFERENCE = re.compile(r"(?:[\w.-]+(?:/[\w.-]+)?--)?[\w-]+(?:\.[\w-]+)*\.[^\W\d]\w*")
_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
_SIZE_KEYS += ("intermediate_size", "max_position_embeddings", "head_dim", "type_vocab_size")
_SIZE_KEYS += ("n_embd", "n_layer", "n_head", "n_positions", "n_inner")
_BOOL_KEYS = ("tie_word_embeddings", "is_encoder_decoder", "is_decoder", "return_dict", "use_cache")
_BOOL_KEYS += ("output_hidden_states", "output_attentions", "attention_bias", "mlp_bias", "torchscript")
_NUMBER_KEYS = ("initializer_range", "rope_theta", "layer_norm_eps", "rms_norm_eps", "layer_norm_epsilon")
_DTYPES = frozenset(
    "float32 float16 bfloat16 float64 float half double float8_e4m3fn float8_e5m2 int8 uint8 int16 int32 int64 bool "
    "auto".split()
)


def read_json(path: str | os.PathLike[str], what: str = "JSON file") -> dict[str, Any]:
    """Read a JSON object from a file, with an error naming the file when it is malformed.

    NaN/Infinity, numbers that overflow to infinity and nesting deeper than ``MAX_JSON_DEPTH`` are
    refused; a model configuration is checked with :func:`check_config_dict` too.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} ({what}) is not UTF-8 text: {exc}. Replace it with a valid JSON file.") from exc
    try:
        data = json.loads(text, parse_constant=_not_finite, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} ({what}) is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}. "
            "Fix or re-download the file."
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path} ({what}) cannot be used: {exc}. Fix or re-download the file.") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} ({what}) must hold a JSON object, found {type(data).__name__}")
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ConfigError(f"{path} ({what}) nests objects/lists more than {MAX_JSON_DEPTH} deep; fix the file")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    if what == "model configuration":
        check_config_dict(data, path)
    out = ConfigDict(data)
    out.source = str(path)
    return out


def _not_finite(name: str) -> float:
    raise ValueError(f"{name} is not a valid JSON number (NaN and infinities are refused)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} overflows to infinity")
    return value


def check_config_dict(data: dict[str, Any], source: Any) -> None:
    """Types of the keys the kernel and every model rely on; a ConfigError naming ``source`` otherwise."""

    def refuse(what: str) -> ConfigError:
        return ConfigError(f"{source}: {what}. Fix the file (or download it again).")

    for key, value in data.items():
        if key.startswith("__") or callable(getattr(PretrainedConfig, key, None)):
            raise refuse(f"the key '{key}' is reserved (it names a method of the configuration object)")
        if key.endswith(("_eps", "_epsilon")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise refuse(f"{key}={value!r} must be a positive number")
        if key.endswith("_token_id") and not _is_token_id(value):
            raise refuse(f"{key}={value!r:.60} must be a token id (an integer), a list of them, or null")
        if ("dropout" in key or key in _NUMBER_KEYS) and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise refuse(f"{key}={value!r:.60} must be a number")
    if not isinstance(data.get("model_type", ""), str):
        raise refuse(f"model_type={data['model_type']!r} must be a string such as \"llama\"")
    auto_map = data.get("auto_map")
    if auto_map is not None and not (
        isinstance(auto_map, dict) and all(isinstance(v, (str, list)) for v in auto_map.values())
    ):
        raise refuse(f"auto_map must map Auto class names to 'module.Class' strings, found {auto_map!r:.80}")
    for name, reference in (auto_map or {}).items():
        named = [reference] if isinstance(reference, str) else reference  # a list: [slow, fast] tokenizer classes
        given = [r for r in named if r is not None and r != ""]
        if not given or not all(isinstance(r, str) and _AUTO_MAP_REFERENCE.fullmatch(r) for r in given):
            raise refuse(
                f"the auto_map entry {name!r} is {reference!r:.120}: name its class as 'module.ClassName' "
                "(a module file of the folder, no path; 'owner/repo--module.ClassName' for another repo), "
                "or remove the entry"
            )
    for key in ("dtype", "torch_dtype"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or value.removeprefix("torch.") not in _DTYPES):
            raise refuse(f"{key}={value!r:.60} is not a dtype name; use e.g. \"float32\" or \"bfloat16\"")
    for key in _BOOL_KEYS:
        if not isinstance(data.get(key, False), bool):
            raise refuse(f"{key}={data[key]!r} must be true or false")
    for key in (*_SIZE_KEYS, "num_labels"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise refuse(f"{key}={value!r} must be a non-negative integer")
    if (data.get("num_labels") or 0) > MAX_LABELS:
        raise refuse(f"num_labels={data['num_labels']} is more than {MAX_LABELS} labels")
    id2label, label2id = data.get("id2label"), data.get("label2id")
    if id2label is not None and not (
        isinstance(id2label, dict) and all(k.lstrip("-").isdigit() and isinstance(v, str) for k, v in id2label.items())
    ):
        raise refuse("id2label must map label ids (\"0\", \"1\", ...) to label names (strings)")
    if label2id is not None and not (
        isinstance(label2id, dict)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in label2id.values())
    ):
        raise refuse("label2id must map label names to integer ids")
    architectures = data.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)
    ):
        raise refuse(f"architectures={architectures!r:.80} must be a list of class names")


def _is_token_id(value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    return value is None or all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def config_from_dict(
    cls: type[PretrainedConfig], config_dict: dict[str, Any], source: Any, overrides: dict[str, Any] | None = None
) -> PretrainedConfig:
    """``cls.from_dict``; any failure becomes a ConfigError naming ``source`` (config.json or a GGUF file)."""
    try:
        return cls.from_dict(config_dict, **(overrides or {}))
    except ConfigError as exc:
        message = str(exc)
        if str(source) in message:
            raise
        raise ConfigError(f"{source}: {message.replace('config.json', Path(str(source)).name)}") from exc
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError, RecursionError) as exc:
        raise ConfigError(
            f"{source} holds a value {cls.__name__} cannot use ({type(exc).__name__}: {exc}); fix the file"
        ) from exc

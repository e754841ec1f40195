"""Base classes for preprocessors: what feature extractors and processors of every modality share.

- :class:`BatchFeature` — the dict a feature extractor returns (``.to(device or dtype)``,
  ``convert_to_tensors("pt" | "np")``, keys readable as attributes).
- :class:`FeatureExtractionMixin` — ``preprocessor_config.json`` save/load; every key of the file is kept
  as an attribute and written back, known or not (``feature_extractor_type`` names the class).
- :class:`SequenceFeatureExtractor` — padding, truncation and ``attention_mask`` of 1-D (audio) or
  2-D (frames x features) sequences, as in the reference implementation.
- :class:`ProcessorMixin` — a feature extractor and a tokenizer behind one object:
  ``processor(audio=..., text=...)``, ``batch_decode``/``decode``, and ``save_pretrained``/``from_pretrained``
  of a folder that also loads in the reference implementation (``processor_config.json`` with the
  feature extractor nested in it, plus the tokenizer's files).

Plugins subclass these and register the subclasses with the ``register_processors`` hook.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from microformers.errors import ConfigError, InputError

PREPROCESSOR_NAME = "preprocessor_config.json"
PROCESSOR_NAME = "processor_config.json"

__all__ = [
    "PREPROCESSOR_NAME",
    "PROCESSOR_NAME",
    "BatchFeature",
    "FeatureExtractionMixin",
    "ProcessorMixin",
    "SequenceFeatureExtractor",
    "setting_source",
]

#: While ``from_dict`` builds a feature extractor: (the file its settings were read from, or None; keyword names).
_BUILDING: ContextVar[tuple[str | None, frozenset[str]] | None] = ContextVar("_BUILDING", default=None)


def setting_source(name: str) -> str:
    """Where the feature extractor setting ``name`` being checked came from, for an error message: the file it
    was read from (``/m/preprocessor_config.json``), ``"keyword argument"``, or ``"settings dict"``.

    It answers for the object ``from_dict`` (so ``from_pretrained``) is building; anywhere else (a direct
    constructor or method call) the value was an ``"argument"``.
    """
    building = _BUILDING.get()
    if building is None:
        return "argument"
    file, keywords = building
    if name in keywords:
        return "keyword argument"
    return file or "settings dict"


@contextmanager
def _building(file: str | None, keywords: frozenset[str]) -> Iterator[None]:
    token = _BUILDING.set((file, keywords))
    try:
        yield
    finally:
        _BUILDING.reset(token)


def _torch() -> Any:
    import torch

    return torch


class BatchFeature(dict):
    """Model inputs by name. ``tensor_type`` ("pt" or "np") converts the values on construction."""

    def __init__(self, data: Mapping[str, Any] | None = None, tensor_type: str | None = None) -> None:
        super().__init__(data or {})
        self.convert_to_tensors(tensor_type)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"BatchFeature has no key {name!r} (keys: {', '.join(self)})") from None

    def __getstate__(self) -> dict[str, Any]:
        return {"data": dict(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.update(state["data"])

    def convert_to_tensors(self, tensor_type: str | None = None) -> BatchFeature:
        """Turn every value into a torch tensor (``"pt"``) or numpy array (``"np"``), in place."""
        if tensor_type is None:
            return self
        tensor_type = getattr(tensor_type, "value", tensor_type)
        if tensor_type not in ("pt", "np"):
            raise InputError(f"return_tensors={tensor_type!r} is not supported; use 'pt' (torch) or 'np' (numpy)")
        for key, value in self.items():
            try:
                array = _as_array(value)
                self[key] = _torch().from_numpy(np.ascontiguousarray(array)) if tensor_type == "pt" else array
            except (ValueError, TypeError) as exc:
                raise InputError(
                    f"cannot make a tensor of '{key}' ({exc}); its rows have different lengths — pass padding=True "
                    "(or padding='max_length' with max_length=...) so every row has the same length"
                ) from exc
        return self

    def to(self, *args: Any, **kwargs: Any) -> BatchFeature:
        """Move tensors to a device and/or cast floating-point tensors to a dtype (like ``Tensor.to``)."""
        torch = _torch()
        device = kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        non_blocking = kwargs.pop("non_blocking", False)
        if kwargs:
            raise InputError(f"BatchFeature.to() got unexpected arguments {sorted(kwargs)}; pass a device or dtype")
        for arg in args:
            if isinstance(arg, torch.dtype):
                dtype = arg
            elif isinstance(arg, (str, torch.device, int)):
                device = arg
            else:
                raise InputError(f"BatchFeature.to({arg!r}): pass a device ('cpu', 'cuda:0') or a torch dtype")
        for key, value in self.items():
            if not isinstance(value, torch.Tensor):
                continue
            if dtype is not None and value.is_floating_point():
                value = value.to(dtype=dtype, non_blocking=non_blocking)
            if device is not None:
                value = value.to(device=device, non_blocking=non_blocking)
            self[key] = value
        return self


def _as_array(value: Any) -> np.ndarray:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (np.ndarray, torch.Tensor)):
        rows = [_as_array(v) for v in value]
        if len({r.shape for r in rows}) != 1:
            raise ValueError("rows of different shapes " + str(sorted({r.shape for r in rows})[:3]))
        return np.stack(rows)
    array = np.asarray(value)
    if array.dtype == object:
        raise ValueError("ragged nested sequences")
    return array


def _json_ready(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return value


class FeatureExtractionMixin:
    """``preprocessor_config.json`` <-> object. Subclasses take their settings as keyword arguments."""

    model_input_names: ClassVar[list[str]] = ["input_values"]
    #: Keys never written to the JSON file.
    _transient_keys: ClassVar[tuple[str, ...]] = ("_processor_class",)

    def __init__(self, **kwargs: Any) -> None:
        self._processor_class = kwargs.pop("processor_class", None)
        kwargs.pop("feature_extractor_type", None)
        for key, value in kwargs.items():
            try:
                setattr(self, key, value)
            except AttributeError as exc:
                raise ConfigError(
                    f"cannot set '{key}' ({setting_source(key)}) on {type(self).__name__}: {exc}"
                ) from exc

    def __repr__(self) -> str:
        return f"{type(self).__name__} {self.to_json_string()}"

    # -- serialisation ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every setting (unknown keys of a loaded file included) plus ``feature_extractor_type``."""
        data = {k: _json_ready(copy.deepcopy(v)) for k, v in vars(self).items() if k not in self._transient_keys}
        for key in [k for k in data if k.startswith("_")]:
            data.pop(key)
        data["feature_extractor_type"] = type(self).__name__
        if self._processor_class:
            data["processor_class"] = self._processor_class
        return data

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str | os.PathLike[str]) -> None:
        from microformers.hub import atomic_write_text

        atomic_write_text(Path(path), self.to_json_string())

    def save_pretrained(self, save_directory: str | os.PathLike[str], **kwargs: Any) -> list[str]:
        """Write ``preprocessor_config.json`` into ``save_directory`` (atomically)."""
        from microformers.hub import staged_folder

        if kwargs.pop("push_to_hub", False):
            raise ConfigError("push_to_hub is not supported by microformers; upload the folder with huggingface_hub")
        if kwargs:
            raise ConfigError(f"{type(self).__name__}.save_pretrained() got unexpected arguments {sorted(kwargs)}")
        target = Path(save_directory)
        if target.is_file():
            raise ConfigError(f"save_pretrained: {target} is a file; pass a folder")
        with staged_folder(target) as staging:
            (staging / PREPROCESSOR_NAME).write_text(self.to_json_string(), encoding="utf-8")
        return [str(target / PREPROCESSOR_NAME)]

    @classmethod
    def from_dict(cls, config: Mapping[str, Any], **kwargs: Any) -> Any:
        """Build from a settings dict; ``kwargs`` override settings (an unknown keyword is an error)."""
        settings = dict(config)
        known = set(settings) | _init_parameters(cls)
        unknown = sorted(k for k in kwargs if k not in known)
        if unknown:
            raise ConfigError(
                f"{cls.__name__}.from_pretrained() got unexpected arguments {unknown}; "
                f"settings of this feature extractor: {', '.join(sorted(known - {'kwargs'}))}"
            )
        settings.update(kwargs)
        with _building(getattr(config, "source", None) or None, frozenset(kwargs)):  # read_json's file
            return cls(**settings)

    @classmethod
    def get_feature_extractor_dict(cls, pretrained: str | os.PathLike[str], **hub_kwargs: Any) -> dict[str, Any]:
        """The settings of a folder: ``preprocessor_config.json``, else ``processor_config.json``'s nested entry."""
        from microformers.configuration import ConfigDict, read_json
        from microformers.errors import FileMissingError
        from microformers.hub import resolve_file

        path = resolve_file(pretrained, PREPROCESSOR_NAME, required=False, **hub_kwargs)
        if path is not None:
            data = read_json(path, what="feature extractor configuration")
            if not isinstance(data, dict):
                raise ConfigError(f"{path} must hold a JSON object of settings")
            return data
        path = resolve_file(pretrained, PROCESSOR_NAME, required=False, **hub_kwargs)
        if path is not None:
            nested = read_json(path, what="processor configuration").get("feature_extractor")
            if isinstance(nested, dict):
                settings = ConfigDict(nested)
                settings.source = f"{path} ('feature_extractor')"
                return settings
        raise FileMissingError(
            f"{pretrained} has no {PREPROCESSOR_NAME} (nor a {PROCESSOR_NAME} with a 'feature_extractor' entry); "
            "save one with feature_extractor.save_pretrained(folder)"
        )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike[str], **kwargs: Any) -> Any:
        from microformers.hub import split_hub_kwargs

        hub_kwargs, rest = split_hub_kwargs(kwargs)
        rest.pop("trust_remote_code", None)
        return cls.from_dict(cls.get_feature_extractor_dict(pretrained_model_name_or_path, **hub_kwargs), **rest)


def _init_parameters(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names |= {p.name for p in inspect.signature(init).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD}
    names.discard("self")
    return names


_PADDING_STRATEGIES = ("longest", "max_length", "do_not_pad")


class SequenceFeatureExtractor(FeatureExtractionMixin):
    """Pads and truncates sequences of feature vectors (``feature_size`` values per step; 1 for raw audio)."""

    def __init__(self, feature_size: int, sampling_rate: int, padding_value: float, **kwargs: Any) -> None:
        self.feature_size = feature_size
        self.sampling_rate = sampling_rate
        self.padding_value = padding_value
        self.padding_side = kwargs.pop("padding_side", "right")
        self.return_attention_mask = kwargs.pop("return_attention_mask", True)
        if self.padding_side not in ("left", "right"):
            raise ConfigError(f"padding_side={self.padding_side!r}: use 'left' or 'right'")
        super().__init__(**kwargs)

    # -- padding ------------------------------------------------------------------------------------
    def _padding_strategy(self, padding: bool | str, max_length: int | None) -> str:
        if padding is True:
            strategy = "longest"
        elif padding is False or padding is None:
            strategy = "do_not_pad"
        else:
            strategy = str(getattr(padding, "value", padding))
            if strategy not in _PADDING_STRATEGIES:
                raise InputError(f"padding={padding!r}: use True/'longest', 'max_length', or False/'do_not_pad'")
        if strategy == "max_length" and max_length is None:
            raise InputError("padding='max_length' needs max_length=...")
        if strategy != "do_not_pad" and self.padding_value is None:
            raise ConfigError(f"{type(self).__name__} has no padding_value; set feature_extractor.padding_value = 0.0")
        return strategy

    def pad(
        self,
        processed_features: Any,
        padding: bool | str = True,
        max_length: int | None = None,
        truncation: bool = False,
        pad_to_multiple_of: int | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | None = None,
    ) -> BatchFeature:
        """Pad a batch (``{"input_values": [...]}`` or a list of such dicts) to one length.

        Returns numpy arrays (float64 cast to float32) unless ``return_tensors`` says otherwise; when the
        inputs were torch tensors and ``return_tensors`` is not given, torch tensors.
        """
        if (
            isinstance(processed_features, (list, tuple))
            and processed_features
            and isinstance(processed_features[0], Mapping)
        ):
            processed_features = {key: [row[key] for row in processed_features] for key in processed_features[0]}
        if not isinstance(processed_features, Mapping):
            raise InputError(
                f"{type(self).__name__}.pad() takes a dict of lists (or a list of dicts) with "
                f"'{self.model_input_names[0]}', got {type(processed_features).__name__}"
            )
        main = self.model_input_names[0]
        if main not in processed_features:
            raise InputError(
                f"{type(self).__name__}.pad() needs '{main}' in its input; got keys {list(processed_features)}"
            )
        features = dict(processed_features)
        want_mask = self.return_attention_mask if return_attention_mask is None else return_attention_mask
        rows = features[main]
        if len(rows) == 0:
            if want_mask:
                features["attention_mask"] = []
            return BatchFeature(features)
        if return_tensors is None:  # torch in, torch out; otherwise a list of numpy rows
            first = rows[0]
            if isinstance(first, (list, tuple)) and first:
                first = first[0]
            return_tensors = "pt" if isinstance(first, _torch().Tensor) else None
        for key, value in features.items():
            if isinstance(value[0], (int, float)):
                features[key] = np.asarray(value)
            elif not isinstance(value, np.ndarray):
                features[key] = [_as_array(v) for v in value]
        strategy = self._padding_strategy(padding, max_length)
        batch = len(features[main])
        if any(len(v) != batch for v in features.values()):
            raise InputError(f"{type(self).__name__}.pad(): the entries of the batch have different batch sizes")
        items = [
            self._truncate({k: v[i] for k, v in features.items()}, max_length, pad_to_multiple_of, truncation)
            for i in range(batch)
        ]
        if strategy == "longest":
            max_length = max(len(item[main]) for item in items)
            strategy = "max_length"
        out: dict[str, list[Any]] = {}
        for item in items:
            for key, value in self._pad(item, max_length, strategy, pad_to_multiple_of, want_mask).items():
                if value.dtype == np.float64:
                    value = value.astype(np.float32)
                out.setdefault(key, []).append(value)
        return BatchFeature(out, tensor_type=return_tensors)

    def _pad(
        self,
        features: dict[str, Any],
        max_length: int | None,
        strategy: str,
        pad_to_multiple_of: int | None,
        return_attention_mask: bool,
    ) -> dict[str, Any]:
        main = self.model_input_names[0]
        values = features[main]
        if strategy == "longest":
            max_length = len(values)
        if max_length is not None and pad_to_multiple_of is not None and max_length % pad_to_multiple_of:
            max_length = (max_length // pad_to_multiple_of + 1) * pad_to_multiple_of
        if return_attention_mask and "attention_mask" not in features:
            features["attention_mask"] = np.ones(len(values), dtype=np.int32)
        if strategy != "do_not_pad" and max_length is not None and len(values) < max_length:
            missing = max_length - len(values)
            sides = (0, missing) if self.padding_side == "right" else (missing, 0)
            if return_attention_mask:
                features["attention_mask"] = np.pad(features["attention_mask"], sides)
            shape = (sides, (0, 0)) if self.feature_size > 1 else sides
            features[main] = np.pad(values, shape, "constant", constant_values=self.padding_value)
        return features

    def _truncate(
        self, features: dict[str, Any], max_length: int | None, pad_to_multiple_of: int | None, truncation: bool
    ) -> dict[str, Any]:
        if not truncation:
            return features
        if max_length is None:
            raise InputError("truncation=True needs max_length=...")
        if pad_to_multiple_of is not None and max_length % pad_to_multiple_of:
            max_length = (max_length // pad_to_multiple_of + 1) * pad_to_multiple_of
        main = self.model_input_names[0]
        if len(features[main]) > max_length:
            features[main] = features[main][:max_length]
            if "attention_mask" in features:
                features["attention_mask"] = features["attention_mask"][:max_length]
        return features


class ProcessorBase:
    """Two components used as one: a feature extractor or image processor (``attributes[0]``) and a tokenizer
    (``attributes[1]``). Shared by every processor: decoding through the tokenizer and the files
    (``processor_config.json`` plus the tokenizer's). Subclasses write ``__init__``, ``__call__`` and
    ``from_pretrained`` for their inputs (:class:`ProcessorMixin` for audio)."""

    attributes: ClassVar[list[str]] = ["feature_extractor", "tokenizer"]
    tokenizer: Any

    def batch_decode(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer.decode(*args, **kwargs)

    # -- files --------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """``processor_config.json``: the first component's settings nested under its name, and the class."""
        name = self.attributes[0]
        settings = getattr(self, name).to_dict()
        settings.pop("processor_class", None)
        return {name: settings, "processor_class": type(self).__name__}

    def save_pretrained(self, save_directory: str | os.PathLike[str], **kwargs: Any) -> list[str]:
        """Write ``processor_config.json`` (see :meth:`to_dict`) and the tokenizer's files, atomically."""
        from microformers.hub import staged_folder

        if kwargs.pop("push_to_hub", False):
            raise ConfigError("push_to_hub is not supported by microformers; upload the folder with huggingface_hub")
        if kwargs:
            raise ConfigError(f"{type(self).__name__}.save_pretrained() got unexpected arguments {sorted(kwargs)}")
        target = Path(save_directory)
        if target.is_file():
            raise ConfigError(f"save_pretrained: {target} is a file; pass a folder")
        with staged_folder(target) as staging:
            previous = getattr(self.tokenizer, "processor_class", None)
            try:
                if hasattr(self.tokenizer, "processor_class"):
                    self.tokenizer.processor_class = type(self).__name__
                self.tokenizer.save_pretrained(staging)
            finally:
                if hasattr(self.tokenizer, "processor_class"):
                    self.tokenizer.processor_class = previous
            text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
            (staging / PROCESSOR_NAME).write_text(text, encoding="utf-8")
            written = sorted(p.name for p in staging.iterdir())
        return [str(target / name) for name in written]

    @classmethod
    def _component_class(cls, ref: Any, what: str) -> Any:
        if isinstance(ref, str):
            from microformers.plugins import registry

            return registry.require("processors", ref, what=what)
        return ref


class ProcessorMixin(ProcessorBase):
    """A feature extractor and a tokenizer used as one: audio in, token ids out, text back from ids.

    Subclasses set ``feature_extractor_class`` (the class, or its name in the processors registry) and
    optionally ``tokenizer_class`` (default: whatever ``AutoTokenizer`` picks for the folder).
    """

    feature_extractor_class: ClassVar[Any] = None
    tokenizer_class: ClassVar[Any] = None

    def __init__(self, feature_extractor: Any = None, tokenizer: Any = None, **kwargs: Any) -> None:
        if kwargs:
            raise ConfigError(f"{type(self).__name__}() got unexpected arguments {sorted(kwargs)}")
        if feature_extractor is None or tokenizer is None:
            raise ConfigError(
                f"{type(self).__name__} needs both feature_extractor=... and tokenizer=..., got "
                f"feature_extractor={type(feature_extractor).__name__}, tokenizer={type(tokenizer).__name__}"
            )
        self.feature_extractor = feature_extractor
        self.tokenizer = tokenizer

    def __repr__(self) -> str:
        return f"{type(self).__name__}(feature_extractor={self.feature_extractor!r}, tokenizer={self.tokenizer!r})"

    @property
    def model_input_names(self) -> list[str]:
        return [*self.feature_extractor.model_input_names, "labels"]

    # -- calling ------------------------------------------------------------------------------------
    def _split_kwargs(self, kwargs: dict[str, Any], audio: bool, text: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        audio_names = _call_parameters(self.feature_extractor) if audio else set()
        text_names = _call_parameters(self.tokenizer) if text else set()
        unknown = sorted(k for k in kwargs if k not in audio_names | text_names)
        if unknown:
            raise InputError(
                f"{type(self).__name__}() got arguments {unknown} that neither the feature extractor nor the "
                "tokenizer takes"
            )
        return (
            {k: v for k, v in kwargs.items() if k in audio_names},
            {k: v for k, v in kwargs.items() if k in text_names},
        )

    def __call__(self, audio: Any = None, text: Any = None, **kwargs: Any) -> Any:
        """``audio`` through the feature extractor, ``text`` through the tokenizer; both: ids become ``labels``."""
        if "raw_speech" in kwargs and audio is None:
            audio = kwargs.pop("raw_speech")
        if audio is None and text is None:
            raise InputError(f"{type(self).__name__}() needs audio=... and/or text=...")
        audio_kwargs, text_kwargs = self._split_kwargs(kwargs, audio is not None, text is not None)
        inputs = self.feature_extractor(audio, **audio_kwargs) if audio is not None else None
        encodings = self.tokenizer(text, **text_kwargs) if text is not None else None
        if inputs is None:
            return encodings
        if encodings is None:
            return inputs
        inputs["labels"] = encodings["input_ids"]
        return inputs

    def pad(self, *args: Any, **kwargs: Any) -> Any:
        """Pad audio features with the feature extractor and/or ``labels`` with the tokenizer."""
        input_features = kwargs.pop("input_features", None)
        labels = kwargs.pop("labels", None)
        if args:
            input_features, args = args[0], args[1:]
        if input_features is not None:
            input_features = self.feature_extractor.pad(input_features, *args, **kwargs)
        if labels is not None:
            labels = self.tokenizer.pad(labels, **kwargs)
        if labels is None:
            return input_features
        if input_features is None:
            return labels
        input_features["labels"] = labels["input_ids"]
        return input_features

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike[str], **kwargs: Any) -> Any:
        """Load the feature extractor and the tokenizer of a folder (or Hub id)."""
        from microformers.auto import AutoTokenizer, resolve_source
        from microformers.hub import split_hub_kwargs

        pretrained, kwargs = resolve_source(pretrained_model_name_or_path, kwargs)
        hub_kwargs, rest = split_hub_kwargs(kwargs)
        rest.pop("trust_remote_code", None)
        fe_cls = cls._component_class(cls.feature_extractor_class, "feature extractor")
        fe_names = set(_init_parameters(fe_cls)) | set(fe_cls.get_feature_extractor_dict(pretrained, **hub_kwargs))
        fe_kwargs = {k: rest.pop(k) for k in list(rest) if k in fe_names}
        feature_extractor = fe_cls.from_pretrained(pretrained, **hub_kwargs, **fe_kwargs)
        if cls.tokenizer_class is not None:
            tokenizer = cls._component_class(cls.tokenizer_class, "tokenizer").from_pretrained(
                pretrained, **hub_kwargs, **rest
            )
        else:
            tokenizer = AutoTokenizer.from_pretrained(pretrained, **hub_kwargs, **rest)
        return cls(feature_extractor=feature_extractor, tokenizer=tokenizer)


def _call_parameters(component: Any) -> set[str]:
    try:
        parameters = inspect.signature(component.__call__).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}


def is_sequence_of_arrays(value: Any) -> bool:
    """Whether ``value`` is a batch (a list/tuple of arrays or lists, or a 2-D array)."""
    if isinstance(value, np.ndarray):
        return value.ndim > 1
    return isinstance(value, Sequence) and bool(value) and isinstance(value[0], (np.ndarray, list, tuple))

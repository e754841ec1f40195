"""Adapter configurations: ``PeftConfig`` and ``LoraConfig``, read and written as ``adapter_config.json``.

The file is the one the ``peft`` library writes. Settings of that file that this plugin does not
implement (DoRA, LoftQ, layer replication, ...) are refused with an error naming them when they are
switched on; settings left at their defaults are accepted, so files written by any ``peft`` version load.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, ClassVar

import attrs

from microformers.configuration import refuse_push_to_hub
from microformers.errors import ConfigError, MicroformersError
from microformers.hub import atomic_write_text, resolve_folder, split_hub_kwargs

ADAPTER_CONFIG_NAME = "adapter_config.json"
ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"
ADAPTER_BIN_NAME = "adapter_model.bin"  # peft's save_pretrained(safe_serialization=False)
BIAS_CHOICES = ("none", "all", "lora_only")
INIT_CHOICES = (True, False, "gaussian")

# Keys of peft's adapter_config.json that are bookkeeping, not behaviour.
_METADATA_KEYS = {"peft_version", "auto_mapping", "megatron_core", "qalora_group_size", "revision"}


class AdapterError(MicroformersError, ValueError):
    """An adapter does not fit the model, its files are malformed, or adapter names collide."""


def _string_list(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(set(value), key=str)
    return list(value) if isinstance(value, (list, tuple)) else value  # anything else: the validator names it


def _flag(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):  # "no" would be truthy: a string here is a damaged file, not a choice
        raise ConfigError(f"{type(instance).__name__}({attribute.name}={value!r}): give true or false")


def _optional_text(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{type(instance).__name__}({attribute.name}={value!r}): give a string or null")


@attrs.define(kw_only=True)
class PeftConfig:
    """What every adapter configuration carries (``peft``'s ``PeftConfig`` fields)."""

    peft_type: ClassVar[str] = ""
    task_type: str | None = attrs.field(default=None, validator=_optional_text)
    base_model_name_or_path: str | None = attrs.field(default=None, validator=_optional_text)
    revision: str | None = attrs.field(default=None, validator=_optional_text)
    inference_mode: bool = attrs.field(default=False, validator=_flag)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = ADAPTER_CONFIG_NAME) -> PeftConfig:
        """Build the config class of ``data["peft_type"]`` from an ``adapter_config.json`` dict."""
        if cls is PeftConfig:
            peft_type = str(data.get("peft_type", ""))
            if peft_type != LoraConfig.peft_type:
                raise ConfigError(
                    f"{where}: peft_type {peft_type!r} is not an adapter type of microformers-peft (it provides LORA)"
                )
            return LoraConfig.from_dict(data, where)
        fields = {f.name for f in attrs.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key == "peft_type" or key in _METADATA_KEYS:
                continue
            if key in fields:
                kwargs[key] = value
            elif value not in (None, False, {}, [], ""):
                raise ConfigError(
                    f"{where}: setting {key}={value!r} is not supported by microformers-peft; "
                    f"supported settings: {', '.join(sorted(fields))}"
                )
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from exc

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike[str], subfolder: str | None = None, **kwargs: Any
    ) -> PeftConfig:
        """Read ``adapter_config.json`` from a folder or Hub repo (``revision``, ``token`` ... as in peft)."""
        hub_kwargs, rest = split_hub_kwargs(kwargs)
        if rest:
            raise ConfigError(
                f"PeftConfig.from_pretrained() does not take {', '.join(sorted(rest))}; drop it or check the spelling"
            )
        folder = resolve_folder(pretrained_model_name_or_path, [ADAPTER_CONFIG_NAME], subfolder=subfolder or "",
                                **hub_kwargs)  # fmt: skip
        path = Path(folder) / ADAPTER_CONFIG_NAME
        if not path.is_file():
            raise ConfigError(f"{path} not found: an adapter folder holds {ADAPTER_CONFIG_NAME} and its weights")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a JSON object")
        return cls.from_dict(data, str(path))

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["peft_type"] = self.peft_type
        for key, value in data.items():
            if isinstance(value, (set, frozenset, tuple)):
                data[key] = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        return dict(sorted(data.items()))

    def save_pretrained(self, folder: str | os.PathLike[str], push_to_hub: bool = False, **kwargs: Any) -> None:
        """Write ``adapter_config.json`` into ``folder`` (atomically)."""
        refuse_push_to_hub(push_to_hub)
        if kwargs:
            raise ConfigError(
                f"PeftConfig.save_pretrained() does not take {', '.join(sorted(kwargs))}; drop it or check the spelling"
            )
        Path(folder).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(folder) / ADAPTER_CONFIG_NAME, json.dumps(self.to_dict(), indent=2) + "\n")


def _positive_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"LoraConfig({attribute.name}={value!r}): the rank must be a positive integer")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _alpha(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not _number(value):
        raise ConfigError(f"LoraConfig({attribute.name}={value!r}): the scale must be a finite number")


def _rank_pattern(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"LoraConfig(rank_pattern={value!r}): give a mapping of module name/pattern -> rank")
    for key, rank in value.items():
        if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
            raise ConfigError(f"LoraConfig(rank_pattern={{{key!r}: {rank!r}}}): each rank must be a positive integer")


def _alpha_pattern(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"LoraConfig(alpha_pattern={value!r}): give a mapping of module name/pattern -> alpha")
    for key, alpha in value.items():
        if not _number(alpha):
            raise ConfigError(f"LoraConfig(alpha_pattern={{{key!r}: {alpha!r}}}): each alpha must be a finite number")


def _layer_indices(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    values = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if value is None:
        return
    if not isinstance(values, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values
    ):
        raise ConfigError(f"LoraConfig(layers_to_transform={value!r}): give a layer index or a list of them")


def _layer_names(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if (
        value is not None
        and not isinstance(value, str)
        and not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))
    ):
        raise ConfigError(f"LoraConfig(layers_pattern={value!r}): give the name of the layer list, or a list of names")


def _choice(choices: tuple[Any, ...]) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not any(value is c or (isinstance(value, str) and value == c) for c in choices):
            raise ConfigError(
                f"LoraConfig({attribute.name}={value!r}) is not supported; choose one of {', '.join(map(repr, choices))}"
            )

    return check


def _dropout(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
        raise ConfigError(f"LoraConfig(lora_dropout={value!r}): a probability in [0, 1) is needed")


def _modules(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"LoraConfig({attribute.name}={value!r}): give module names (strings) or one regex string")


@attrs.define(kw_only=True)
class LoraConfig(PeftConfig):
    """Low-rank adaptation: ``W x + (B A x) * lora_alpha / r`` on each targeted linear layer.

    ``target_modules``: a list of module names (a name matches itself and any module path ending in
    ``.name``), a regex string matched against the full module path, or ``"all-linear"`` (every linear
    layer except the output layer). ``modules_to_save``: modules trained and saved in full beside the
    adapter. ``bias``: ``"none"``, ``"all"`` or ``"lora_only"`` (which biases train and are saved).
    ``use_rslora``: scale by ``lora_alpha / sqrt(r)``. ``fan_in_fan_out``: the base weight is stored
    ``(in, out)`` (GPT-2's ``Conv1D``; detected and set automatically).
    """

    peft_type: ClassVar[str] = "LORA"
    r: int = attrs.field(default=8, validator=_positive_int)
    lora_alpha: float = attrs.field(default=8, validator=_alpha)
    lora_dropout: float = attrs.field(default=0.0, validator=_dropout)
    target_modules: list[str] | str | None = attrs.field(default=None, converter=_string_list, validator=_modules)
    exclude_modules: list[str] | str | None = attrs.field(default=None, converter=_string_list, validator=_modules)
    modules_to_save: list[str] | None = attrs.field(default=None, converter=_string_list, validator=_modules)
    bias: str = attrs.field(default="none", validator=_choice(BIAS_CHOICES))
    use_rslora: bool = attrs.field(default=False, validator=_flag)
    fan_in_fan_out: bool = attrs.field(default=False, validator=_flag)
    init_lora_weights: bool | str = attrs.field(default=True, validator=_choice(INIT_CHOICES))
    layers_to_transform: list[int] | int | None = attrs.field(default=None, validator=_layer_indices)
    layers_pattern: list[str] | str | None = attrs.field(default=None, validator=_layer_names)
    rank_pattern: dict[str, int] = attrs.field(factory=dict, validator=_rank_pattern)
    alpha_pattern: dict[str, float] = attrs.field(factory=dict, validator=_alpha_pattern)

    def scaling(self, r: int, alpha: float) -> float:
        return alpha / (r**0.5) if self.use_rslora else alpha / r

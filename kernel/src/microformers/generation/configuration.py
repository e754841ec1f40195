"""``GenerationConfig``: the settings of ``model.generate``, read from and written to ``generation_config.json``.

Every field defaults to ``None``, meaning "not set": a call merges the config it is given (or the
model's) with keyword overrides, and only then fills what is still unset from :data:`DEFAULTS`, so a
value in ``generation_config.json`` is never hidden by a library default. Keys the class does not
know are kept (``config.my_strategy_option``) and written back, which is how custom strategies carry
their own settings.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import ConfigError, GenerationError
from ..hub import atomic_write_text, resolve_file, split_hub_kwargs
from ..plugins import registry

if TYPE_CHECKING:
    from ..protocols import GenerationConfigCheck

GENERATION_CONFIG_NAME = "generation_config.json"

# What an unset field means when generation runs (the reference implementation's global defaults).
DEFAULTS: dict[str, Any] = {
    "max_length": 20,
    "min_length": 0,
    "do_sample": False,
    "use_cache": True,
    "early_stopping": False,
    "num_beams": 1,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "typical_p": 1.0,
    "repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "num_return_sequences": 1,
    "output_scores": False,
    "output_logits": False,
    "return_dict_in_generate": False,
    "encoder_repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0,
    "remove_invalid_values": False,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "num_assistant_tokens": 20,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.4,
}

# Keys written by other libraries that mean nothing here and are not written back.
_IGNORED_KEYS = ("transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash")


@attrs.define(init=False, slots=False, eq=False)
class GenerationConfig:
    """Settings for ``generate``; construct with keyword arguments (unknown ones are kept as attributes)."""

    # length
    max_new_tokens: int | None = None
    max_length: int | None = None
    min_new_tokens: int | None = None
    min_length: int | None = None
    max_time: float | None = None
    stop_strings: str | list[str] | None = None
    early_stopping: bool | str | None = None
    # strategy
    do_sample: bool | None = None
    num_beams: int | None = None
    num_return_sequences: int | None = None
    length_penalty: float | None = None
    use_cache: bool | None = None
    cache_implementation: str | None = None
    compile_config: bool | dict[str, Any] | None = None
    strategy: str | None = None
    # logits processing
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    typical_p: float | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    bad_words_ids: list[list[int]] | None = None
    suppress_tokens: list[int] | None = None
    begin_suppress_tokens: list[int] | None = None
    sequence_bias: Any = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | list[int] | None = None
    exponential_decay_length_penalty: tuple[int, float] | None = None
    remove_invalid_values: bool | None = None
    epsilon_cutoff: float | None = None
    eta_cutoff: float | None = None
    encoder_repetition_penalty: float | None = None
    encoder_no_repeat_ngram_size: int | None = None
    guidance_scale: float | None = None
    watermarking_config: Any = None
    renormalize_logits: bool | None = None
    # assisted and prompt-lookup decoding
    num_assistant_tokens: int | None = None
    num_assistant_tokens_schedule: str | None = None
    assistant_confidence_threshold: float | None = None
    prompt_lookup_num_tokens: int | None = None
    max_matching_ngram_size: int | None = None
    # special tokens
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    decoder_start_token_id: int | None = None
    # outputs
    return_dict_in_generate: bool | None = None
    output_scores: bool | None = None
    output_logits: bool | None = None
    output_attentions: bool | None = None
    output_hidden_states: bool | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, repr=False)

    def __init__(self, **kwargs: Any) -> None:
        known = {name for name in attrs.fields_dict(type(self)) if name != "extra"}
        for key in _IGNORED_KEYS:
            kwargs.pop(key, None)
        values = {k: kwargs.pop(k) for k in list(kwargs) if k in known}
        self.__attrs_init__(**values, extra=dict(kwargs))  # type: ignore[attr-defined]

    # -- unknown keys behave like attributes -----------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        extra = self.__dict__.get("extra")
        if extra is not None and name in extra:
            return extra[name]
        raise AttributeError(f"'GenerationConfig' has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "extra" or name in _field_names() or name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self.__dict__.setdefault("extra", {})[name] = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GenerationConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"GenerationConfig {self.to_json_string()}"

    # -- merging ---------------------------------------------------------------------------------
    def update(self, **kwargs: Any) -> dict[str, Any]:
        """Set the given known fields (and existing custom keys); return the keys that are neither."""
        unused: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key in _field_names() or key in self.extra:
                setattr(self, key, value)
            else:
                unused[key] = value
        return unused

    def merged_with(self, base: GenerationConfig) -> GenerationConfig:
        """A copy of ``self`` whose unset fields (and absent custom keys) come from ``base``."""
        merged = copy.deepcopy(self)
        for name in _field_names():
            if getattr(merged, name) is None:
                setattr(merged, name, copy.deepcopy(getattr(base, name)))
        for key, value in base.extra.items():
            merged.extra.setdefault(key, copy.deepcopy(value))
        return merged

    def with_defaults(self) -> GenerationConfig:
        """A copy with every unset field that has a default filled from :data:`DEFAULTS`."""
        filled = copy.deepcopy(self)
        for key, value in DEFAULTS.items():
            if getattr(filled, key) is None:
                setattr(filled, key, value)
        return filled

    @property
    def eos_token_ids(self) -> list[int]:
        """``eos_token_id`` as a list (empty when unset)."""
        eos = self.eos_token_id
        if eos is None:
            return []
        return [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]

    # -- validation ------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`GenerationError` naming the setting when values are invalid or contradict each other.

        Three passes: the settings the kernel itself reads (lengths, beams, cache, compile); then the checks
        plugins contribute for the settings their strategies read (hook ``register_generation_config_checks``,
        in name order; ``microformers-generation`` checks sampling, penalties, stop strings ...); then token
        ids and contradictions between settings. Without any plugin it is less strict, never wrong.
        """
        for name, minimum in _INTEGER_MINIMUMS:
            _check_int(self, name, minimum)
        if self.cache_implementation not in (None, "dynamic", "static"):
            raise GenerationError(
                f"cache_implementation={self.cache_implementation!r} is unknown; use 'dynamic' (default) or 'static'"
            )
        if self.compile_config is not None and not isinstance(self.compile_config, (bool, dict)):
            raise GenerationError("compile_config must be True/False or a dict of torch.compile options")
        for registration in registry.all("generation_config_checks"):
            check: GenerationConfigCheck = registration.load()
            check(self)
        self._check_consistency()

    def _check_consistency(self) -> None:
        """Token ids are token ids; minimum lengths do not exceed the maximum ones."""
        for name in ("bos_token_id", "pad_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is not None and not _is_token(value):
                raise GenerationError(f"{name}={value!r} must be a non-negative integer token id")
        eos = self.eos_token_id
        if eos is not None and not (
            _is_token(eos) or (isinstance(eos, (list, tuple)) and eos and all(_is_token(e) for e in eos))
        ):
            raise GenerationError(f"eos_token_id={eos!r} must be a token id or a non-empty list of token ids")
        if (
            self.max_length is not None
            and self.min_length is not None
            and self.max_new_tokens is None
            and self.min_length > self.max_length
        ):
            raise GenerationError(f"min_length={self.min_length} is larger than max_length={self.max_length}")
        if self.max_new_tokens is not None and self.min_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            raise GenerationError(
                f"min_new_tokens={self.min_new_tokens} is larger than max_new_tokens={self.max_new_tokens}"
            )

    # -- serialisation ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Set values only (unset fields are left out, as in ``generation_config.json``)."""
        out = {name: copy.deepcopy(getattr(self, name)) for name in _field_names() if getattr(self, name) is not None}
        out.update(copy.deepcopy(self.extra))
        return out

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save_pretrained(self, save_directory: str | os.PathLike[str], push_to_hub: bool = False, **_: Any) -> None:
        from ..configuration import refuse_push_to_hub

        refuse_push_to_hub(push_to_hub)
        folder = Path(save_directory)
        if folder.is_file():
            raise ConfigError(f"save_pretrained: {folder} is a file; pass a folder to write {GENERATION_CONFIG_NAME}")
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / GENERATION_CONFIG_NAME, self.to_json_string())

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> GenerationConfig:
        return cls(**{**config_dict, **kwargs})

    @classmethod
    def from_pretrained(
        cls, pretrained: str | os.PathLike[str], config_file_name: str | None = None, **kwargs: Any
    ) -> GenerationConfig:
        """Read ``generation_config.json`` from a folder or Hub repo; keyword arguments override its values."""
        hub_kwargs, overrides = split_hub_kwargs(kwargs)
        overrides.pop("trust_remote_code", None)
        path = resolve_file(pretrained, config_file_name or GENERATION_CONFIG_NAME, **hub_kwargs)
        return cls.from_dict(read_generation_json(path), **overrides)

    @classmethod
    def from_model_config(cls, model_config: Any) -> GenerationConfig:
        """The generation settings a model's ``config.json`` carries (special tokens, legacy generation keys)."""
        values = model_config if isinstance(model_config, dict) else model_config.to_dict()
        names = _field_names() - {"strategy"}
        return cls(**{k: copy.deepcopy(v) for k, v in values.items() if k in names and v is not None})


def read_generation_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); fix or delete it (generation then uses the model's config.json)"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object of generation settings, not {type(data).__name__}")
    return data


# Integer settings and their least valid value, in the order validate checks them.
_INTEGER_MINIMUMS = (
    ("max_new_tokens", 1),
    ("max_length", 1),
    ("min_new_tokens", 0),
    ("min_length", 0),
    ("num_beams", 1),
    ("num_return_sequences", 1),
    ("top_k", 0),
    ("no_repeat_ngram_size", 0),
)


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_int(config: GenerationConfig, name: str, minimum: int) -> None:
    value = getattr(config, name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise GenerationError(f"{name}={value!r} must be an integer >= {minimum}")


_FIELD_NAMES: frozenset[str] | None = None


def _field_names() -> frozenset[str]:
    global _FIELD_NAMES
    if _FIELD_NAMES is None:
        _FIELD_NAMES = frozenset(name for name in attrs.fields_dict(GenerationConfig) if name != "extra")
    return _FIELD_NAMES

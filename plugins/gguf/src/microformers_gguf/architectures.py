"""GGUF architectures: the mappings model plugins register, and the config and tensor plan built from them.

This plugin knows no architecture. A model plugin registers ``register_gguf_architectures``
(``register("qwen3", "microformers_llama.gguf_mapping:QWEN3")``) with a
``microformers_sdk.gguf.GGUFArchitecture``; here it is looked up by the file's ``general.architecture``
and interpreted: metadata keys become the config dict, GGUF tensor names become Hugging Face names,
and the layout transforms undo what llama.cpp's converter did.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from microformers import registry
from microformers.errors import CheckpointError, ConfigError, UnknownModelTypeError
from microformers.plugins import resolve_ref
from microformers_sdk.gguf import (
    OPTIONAL,
    REQUIRED,
    Experts,
    Field,
    GGUFArchitecture,
    Meta,
    Part,
    Quotient,
    Rotary,
    Target,
)

from .reader import GGUFFile, TensorInfo

# tokenizer.json's "model_max_length" when nothing limits it (the value Hugging Face tokenizers use).
UNLIMITED_LENGTH = int(1e30)
KIND = "gguf_architectures"

_BLOCK_NAME = re.compile(r"^blk\.(\d+)\.(.+)$")


def supported_architectures() -> list[str]:
    return [str(name) for name in registry.names(KIND)]


def architecture_of(gguf: GGUFFile) -> GGUFArchitecture:
    """The registered mapping for this file's ``general.architecture``, or an error naming the file and the value."""
    name = gguf.architecture
    if name is None:
        raise ConfigError(
            f"GGUF file {gguf.path} has no 'general.architecture' metadata, so its model type is unknown; "
            "re-convert it with a current llama.cpp."
        )
    reg = registry.get(KIND, name)
    if reg is None:
        provider = registry.provider_of(KIND, name)
        fix = (
            f"Install the plugin that maps it: pip install {provider}."
            if provider
            else f"Use a checkpoint in safetensors form with a plugin for '{name}', or a GGUF of a supported "
            "architecture; a model plugin adds GGUF support with the register_gguf_architectures hook."
        )
        raise UnknownModelTypeError(
            f"GGUF file {gguf.path} holds a '{name}' model, and no installed plugin maps that GGUF architecture "
            f"(supported: {', '.join(supported_architectures()) or 'none'}). {fix}"
        )
    arch = reg.load()
    if not isinstance(arch, GGUFArchitecture):
        raise CheckpointError(
            f"plugin '{reg.plugin}' registered GGUF architecture '{name}' as {reg.ref!r}, which is a "
            f"{type(arch).__name__}, not a microformers_sdk.gguf.GGUFArchitecture; fix or reinstall the plugin."
        )
    return arch


# -- config ----------------------------------------------------------------------------------------


def _full_key(arch: GGUFArchitecture, key: str) -> str:
    return key if key.startswith(("general.", "tokenizer.")) else f"{arch.gguf_name}.{key}"


def _typed(gguf: GGUFFile, key: str, value: Any, kind: type) -> Any:
    def refuse(expected: str) -> ConfigError:
        return ConfigError(
            f"GGUF file {gguf.path}: metadata key '{key}' is {value!r}, not {expected}; "
            "the file is corrupt. Re-convert or download it again."
        )

    if kind in (int, float):
        if kind is int and isinstance(value, list) and value:
            # Some converters write a per-layer list; a single config value is the largest.
            return max(_typed(gguf, key, v, int) for v in value)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (kind is int and not isinstance(value, int))
        ):
            raise refuse("an integer" if kind is int else "a number")
        return kind(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise refuse("a boolean")
        return value
    if kind is str:
        if not isinstance(value, str):
            raise refuse("a string")
        return value
    if kind is list:
        if not isinstance(value, list):
            raise refuse("a list")
        return value
    raise TypeError(f"Meta kind {kind!r} is not int, float, bool, str or list")


class _View:
    """The ``GGUFView`` an architecture's ``adjust_config`` gets."""

    def __init__(self, gguf: GGUFFile, arch: GGUFArchitecture) -> None:
        self.path = gguf.path
        self.metadata = gguf.metadata
        self.shapes = {name: info.shape for name, info in gguf.tensors.items()}
        self._gguf, self._arch = gguf, arch

    def key(self, name: str) -> str:
        return _full_key(self._arch, name)

    def read(self, tensor: str) -> Any:
        import torch

        from .dequant import dequantize

        info = self._gguf.tensors.get(tensor)
        if info is None:
            raise CheckpointError(f"GGUF file {self.path} has no tensor '{tensor}'")
        return dequantize(self._gguf.tensor_bytes(info), info.type_id, info.shape, torch.float32, name=tensor)


def _rope(gguf: GGUFFile, arch: GGUFArchitecture, theta: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``rope_parameters`` (the current HF form) and the legacy ``rope_scaling`` dict (``None`` if unscaled)."""
    prefix = f"{arch.gguf_name}."
    md = gguf.metadata
    kind = md.get(f"{prefix}rope.scaling.type")
    factor_key = f"{prefix}rope.scaling.factor"
    if factor_key not in md:
        factor_key = f"{prefix}rope.scale_linear"
    factor = _typed(gguf, factor_key, md[factor_key], float) if factor_key in md else 1.0
    if kind is None and factor != 1.0:
        kind = "linear"
    if kind in (None, "none") or not isinstance(kind, str):
        return {"rope_type": "default", "rope_theta": theta}, None
    scaling: dict[str, Any] = {"rope_type": kind, "factor": factor}
    original_key = f"{prefix}rope.scaling.original_context_length"
    if original_key in md:
        scaling["original_max_position_embeddings"] = _typed(gguf, original_key, md[original_key], int)
    return {**scaling, "rope_theta": theta}, scaling


def build_config(gguf: GGUFFile) -> dict[str, Any]:
    """A Hugging Face ``config.json``-style dict from the file's metadata and tensor table."""
    config, _ = _build_config(gguf)
    return config


def _build_config(gguf: GGUFFile) -> tuple[dict[str, Any], dict[str, str]]:
    arch = architecture_of(gguf)
    md = gguf.metadata
    config: dict[str, Any] = {"architectures": list(arch.architectures), "model_type": arch.model_type}
    sources: dict[str, str] = {}  # config field -> the metadata key it came from (for error messages)
    for field, spec in arch.config.items():
        if not isinstance(spec, Meta):
            config[field] = spec
            continue
        keys = [_full_key(arch, key) for key in spec.keys]
        present = next((key for key in keys if md.get(key) is not None), None)
        if present is not None:
            config[field] = _typed(gguf, present, md[present], spec.kind)
            sources[field] = present
        elif spec.default is REQUIRED:
            raise ConfigError(
                f"GGUF file {gguf.path} lacks the metadata key '{keys[0]}', which the model config needs; "
                "the file is incomplete. Re-convert it with a current llama.cpp."
            )
        elif spec.default is OPTIONAL:
            continue
        elif isinstance(spec.default, Field):
            config[field] = config[spec.default.name]
            sources[field] = sources.get(spec.default.name, keys[0])
        elif isinstance(spec.default, Quotient):
            numerator, denominator = config[spec.default.numerator], config[spec.default.denominator]
            if not denominator:
                raise ConfigError(
                    f"GGUF file {gguf.path}: {sources.get(spec.default.denominator)} is 0; the file is corrupt"
                )
            config[field] = numerator // denominator
        else:
            config[field] = spec.default

    tokens = md.get("tokenizer.ggml.tokens")
    embedding = gguf.tensors.get(arch.token_embedding)
    vocab_key = f"{arch.gguf_name}.vocab_size"
    if md.get(vocab_key) is not None:
        config["vocab_size"] = _typed(gguf, vocab_key, md[vocab_key], int)
        sources["vocab_size"] = vocab_key
    elif isinstance(tokens, list):
        config["vocab_size"] = len(tokens)
    elif embedding is not None:
        config["vocab_size"] = embedding.shape[0]
    config["tie_word_embeddings"] = arch.tied_output not in gguf.tensors
    for field, tensor in arch.flags.items():
        config[field] = tensor in gguf.tensors
    if arch.rope:
        rope_parameters, rope_scaling = _rope(gguf, arch, config.get("rope_theta", 10000.0))
        config["rope_parameters"] = rope_parameters
        if rope_scaling is not None:
            config["rope_scaling"] = rope_scaling
    for name, key in (("bos", "bos"), ("eos", "eos"), ("pad", "padding"), ("unk", "unknown")):
        token_id = md.get(f"tokenizer.ggml.{key}_token_id")
        if isinstance(token_id, int) and not isinstance(token_id, bool):
            config[f"{name}_token_id"] = token_id
    for field in ("num_attention_heads", "num_key_value_heads", "num_hidden_layers", "hidden_size"):
        value = config.get(field)  # sizes that divide and multiply below: 0 would be a division by zero
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ConfigError(
                f"GGUF file {gguf.path}: {sources.get(field, field)}={value!r} must be a positive integer; the file is "
                "corrupt. Re-convert it with a current llama.cpp."
            )
    _check_context_lengths(gguf, arch, config, sources)
    _check_against_tensors(gguf, arch, config, sources)
    if arch.adjust_config is not None:
        resolve_ref(arch.adjust_config)(config, _View(gguf, arch))
    return config, sources


# The longest context a file may declare: above the longest real models' (10M tokens); position tables and rotary
# caches are sized from it, so a corrupt value would otherwise ask for terabytes.
MAX_CONTEXT_LENGTH = 2**24


def _check_context_lengths(
    gguf: GGUFFile, arch: GGUFArchitecture, config: dict[str, Any], sources: dict[str, str]
) -> None:
    """``<arch>.context_length`` (and ``rope.scaling.original_context_length``) read from the file: 1 to 2**24."""
    for field, spec in arch.config.items():
        key = sources.get(field)
        if not isinstance(spec, Meta) or key is None or not key.endswith("context_length"):
            continue  # a default or a value copied from another field was checked where it came from
        value = config[field]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONTEXT_LENGTH:
            raise ConfigError(
                f"GGUF file {gguf.path}: metadata {key}={value!r} must be a positive number of tokens, at most "
                f"{MAX_CONTEXT_LENGTH:,}; the file is corrupt or was edited. Re-convert or download it again."
            )


def _field_value(config: Mapping[str, Any], field: str | int) -> int | None:
    if isinstance(field, int):
        return field
    if field == "head_dim" and "head_dim" not in config:
        hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
        return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None
    value = config.get(field)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_against_tensors(
    gguf: GGUFFile, arch: GGUFArchitecture, config: dict[str, Any], sources: dict[str, str]
) -> None:
    """Declared sizes must match the tensor table: a corrupt block_count would otherwise build a huge model."""

    def refuse(key: str, value: Any, found: str) -> ConfigError:
        return ConfigError(
            f"GGUF file {gguf.path}: metadata {key}={value}, but {found}. The file is corrupt or was edited; "
            "download or convert it again."
        )

    blocks = {int(m.group(1)) for name in gguf.tensors if (m := _BLOCK_NAME.match(name))}
    for field, spec in arch.config.items():
        if isinstance(spec, Meta) and "block_count" in spec.keys:
            layers = config[field]
            if layers <= 0 or (blocks and layers > max(blocks) + 1):  # (vocab-only files have no tensors)
                raise refuse(sources.get(field, field), layers, f"its tensors cover {len(blocks)} blocks")
    embedding = gguf.tensors.get(arch.token_embedding)
    if embedding is not None and config.get("vocab_size") != embedding.shape[0]:
        raise refuse(
            "the vocabulary size", config.get("vocab_size"), f"{arch.token_embedding} has shape {embedding.shape}"
        )
    for check in arch.checks:
        info = gguf.tensors.get(check.tensor)
        values = [_field_value(config, field) for field in check.fields]
        if info is None or None in values or check.dim >= len(info.shape):
            continue
        expected = 1
        for value in values:
            expected *= value
        if info.shape[check.dim] != expected:
            keys = " x ".join(str(sources.get(field, field)) for field in check.fields)
            shown = " x ".join(str(v) for v in values)
            raise refuse(keys, shown, f"{check.tensor} has shape {info.shape}")


# -- tensors ---------------------------------------------------------------------------------------


@attrs.frozen
class Source:
    """One GGUF tensor feeding a Hugging Face tensor: whole (``target``), one expert's slice, or one fused part."""

    info: TensorInfo
    target: Target | Experts | Part
    expert: int | None = None


_EXPERT_NAME = re.compile(r"^(.+)\.(\d+)\.(weight|bias)$")


def _target_of(arch: GGUFArchitecture, name: str) -> tuple[Target | Experts | Part, str, int | None] | None:
    """The registered target of a GGUF tensor name, its block number (``""`` for global tensors) and expert.

    A name with an expert number before the parameter (``blk.3.ffn_gate.5.weight``, how older converters
    wrote one tensor per expert) matches the pattern ``blk.{bid}.ffn_gate.{expert}.weight``.
    """
    match = _BLOCK_NAME.match(name)
    bid, expert = "", None
    target = arch.tensors.get(name)
    if target is None and match:
        bid, rest = match.group(1), match.group(2)
        target = arch.tensors.get(f"blk.{{bid}}.{rest}")
        per_expert = _EXPERT_NAME.match(rest) if target is None else None
        if per_expert:
            target = arch.tensors.get(f"blk.{{bid}}.{per_expert.group(1)}.{{expert}}.{per_expert.group(3)}")
            expert = int(per_expert.group(2))
    if target is None:
        return None
    if isinstance(target, str):
        target = Target(target)
    return target, bid, expert


def _named(template: str, bid: str, expert: int | None = None) -> str:
    name = template.replace("{bid}", bid)
    return name.replace("{expert}", str(expert)) if expert is not None else name


class TensorPlan:
    """Every Hugging Face tensor of one GGUF file: which GGUF tensors build it and how.

    ``entries`` maps Hugging Face names to their sources; ``skipped`` lists GGUF tensors with no
    counterpart (``derived`` ones excluded). ``row_permutation(name)`` is the row order for an entry that
    is one GGUF tensor reordered by rows only (quantised blocks never cross rows, so a loader can keep
    them packed); ``load(name, dtype)`` dequantises and transforms.
    """

    def __init__(self, gguf: GGUFFile) -> None:
        self.gguf = gguf
        self.arch = architecture_of(gguf)
        self._config: dict[str, Any] | None = None
        self._cache: tuple[str, Any, Any] | None = None
        derived = re.compile("^(?:" + "|".join(self.arch.derived) + ")$") if self.arch.derived else None
        self.entries: dict[str, list[Source]] = {}
        self.skipped: list[str] = []
        for name, info in gguf.tensors.items():
            found = _target_of(self.arch, name)
            if found is None:
                if derived is None or not derived.match(name):
                    self.skipped.append(name)
                continue
            target, bid, expert = found
            if isinstance(target, Experts):
                for index in range(info.shape[0]):
                    self.entries.setdefault(_named(target.name, bid, index), []).append(Source(info, target, index))
            else:
                self.entries.setdefault(_named(target.name, bid, expert), []).append(Source(info, target))
        for hf_name, sources in self.entries.items():
            parts = [s.target for s in sources if isinstance(s.target, Part)]
            if parts and (len(parts) != len(sources) or sorted(p.index for p in parts) != list(range(parts[0].count))):
                have = ", ".join(s.info.name for s in sources)
                raise CheckpointError(
                    f"GGUF file {gguf.path}: '{hf_name}' is built from {parts[0].count} tensors, but the file has "
                    f"{have}; the file is incomplete or mixes layouts. Re-convert it with a current llama.cpp."
                )
            if not parts and len(sources) > 1:
                raise CheckpointError(
                    f"GGUF file {gguf.path}: tensors {', '.join(s.info.name for s in sources)} all map to "
                    f"'{hf_name}'; the file mixes layouts. Re-convert it with a current llama.cpp."
                )
            sources.sort(key=lambda s: s.target.index if isinstance(s.target, Part) else 0)

    @property
    def config(self) -> dict[str, Any]:
        if self._config is None:
            self._config = build_config(self.gguf)
        return self._config

    def infos(self, hf_name: str) -> list[TensorInfo]:
        return [s.info for s in self.entries[hf_name]]

    def row_permutation(self, hf_name: str) -> Any:
        """``(info, perm or None)`` when the entry is one whole GGUF tensor at most row-permuted; else ``None``."""
        sources = self.entries[hf_name]
        if len(sources) != 1 or not isinstance(sources[0].target, Target):
            return None
        transforms = sources[0].target.transforms
        if not all(isinstance(t, Rotary) for t in transforms):
            return None
        info = sources[0].info
        perm = None
        for t in transforms:
            step = self._transformed(info, lambda t=t: t.rows(info.shape[0], self.config))
            perm = step if perm is None else perm[step]
        return info, perm

    def _transformed(self, info: TensorInfo, step: Any) -> Any:
        """Run one layout transform; its ValueError (sizes that do not fit) becomes an error naming the file."""
        try:
            return step()
        except (ValueError, RuntimeError) as exc:
            raise ConfigError(
                f"GGUF file {self.gguf.path}: tensor '{info.name}' (shape {info.shape}) does not fit the layout its "
                f"architecture's mapping expects: {exc}. The file is corrupt or its metadata was edited."
            ) from exc

    def _dequantized(self, info: TensorInfo, dtype: Any) -> Any:
        from .dequant import dequantize

        if self._cache is not None and self._cache[0] == info.name and self._cache[1] == dtype:
            return self._cache[2]
        tensor = dequantize(self.gguf.tensor_bytes(info), info.type_id, info.shape, dtype, name=info.name)
        self._cache = (info.name, dtype, tensor)
        return tensor

    def ordered_bytes(self, hf_name: str) -> tuple[TensorInfo, Any] | None:
        """``(info, raw bytes)`` of an entry that is one whole GGUF tensor, its rows already in Hugging Face order
        (whole quantised rows permuted: blocks never cross rows), so dequantising the bytes gives the tensor;
        ``None`` for entries that need more (parts, experts, layout transforms, a permuted 1-D tensor)."""
        simple = self.row_permutation(hf_name)
        if simple is None:
            return None
        info, perm = simple
        raw = self.gguf.tensor_bytes(info)
        if perm is None:
            return info, raw
        if len(info.shape) == 2:
            return info, raw.view(info.shape[0], -1).index_select(0, perm).view(-1)
        return None

    def load(self, hf_name: str, dtype: Any) -> Any:
        """The tensor under ``hf_name``, dequantised to ``dtype`` and transformed."""
        import torch

        from .dequant import dequantize

        ordered = self.ordered_bytes(hf_name)
        if ordered is not None:
            info, raw = ordered
            return dequantize(raw, info.type_id, info.shape, dtype, name=info.name)
        simple = self.row_permutation(hf_name)
        if simple is not None:  # a permuted 1-D tensor: dequantise, then reorder the values
            info, perm = simple
            return dequantize(self.gguf.tensor_bytes(info), info.type_id, info.shape, dtype, name=info.name)[perm]
        pieces = []
        for source in self.entries[hf_name]:
            stacked = source.expert is not None or isinstance(source.target, Part)
            tensor = (
                self._dequantized(source.info, dtype)
                if stacked
                else dequantize(
                    self.gguf.tensor_bytes(source.info), source.info.type_id, source.info.shape, dtype, source.info.name
                )
            )
            if source.expert is not None:
                tensor = tensor[source.expert]
            for transform in source.target.transforms:
                tensor = self._transformed(source.info, lambda t=transform, x=tensor: t.apply(x, self.config))
            pieces.append(tensor)
        first = self.entries[hf_name][0].target
        if isinstance(first, Part):
            return torch.cat(pieces, dim=first.dim)
        return pieces[0].contiguous()

    def shape(self, hf_name: str) -> tuple[int, ...]:
        shapes = []
        for source in self.entries[hf_name]:
            shape = source.info.shape[1:] if source.expert is not None else source.info.shape
            for transform in source.target.transforms:
                shape = transform.shape(tuple(shape), self.config)
            shapes.append(tuple(shape))
        first = self.entries[hf_name][0].target
        if isinstance(first, Part):
            dim = first.dim
            return (*shapes[0][:dim], sum(s[dim] for s in shapes), *shapes[0][dim + 1 :])
        return shapes[0]

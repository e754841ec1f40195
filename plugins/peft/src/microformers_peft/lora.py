"""``LoraAdapters``: the LoRA implementation behind a model's adapter methods.

The kernel keeps one instance per model (created on the first ``add_adapter`` / ``load_adapter``) and
forwards ``model.add_adapter``, ``load_adapter``, ``set_adapter``, ``disable_adapters``,
``enable_adapters``, ``active_adapters``, ``delete_adapter``, ``get_adapter_state_dict``,
``save_pretrained``, ``merge_adapter``, ``unmerge_adapter``, ``merge_and_unload``, ``unload`` and
``print_trainable_parameters`` to it. Files and tensor names are ``peft``'s: ``adapter_config.json``
and ``adapter_model.safetensors`` (``adapter_model.bin`` with ``safe_serialization=False``) with keys
``base_model.model.<module>.lora_A.weight``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import regex
import torch
from torch import nn

from microformers.configuration import refuse_push_to_hub
from microformers.errors import ConfigError
from microformers.hub import resolve_folder, split_hub_kwargs, staged_folder

from .config import ADAPTER_BIN_NAME, ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, AdapterError, LoraConfig, PeftConfig
from .layers import LoraLayer, ModulesToSave, is_linear_like, is_transposed
from .renames import ModuleRenames

logger = logging.getLogger("microformers.peft")

PEFT_PREFIX = "base_model.model."
# peft's defaults when target_modules is not given, by model_type (peft's
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING). mBART and Marian have none in peft: they get BART's
# ("q_proj", "v_proj"), written out in adapter_config.json, so the file loads in peft all the same.
DEFAULT_TARGETS: dict[str, list[str]] = {
    **{t: ["q_proj", "v_proj"] for t in ("llama", "mistral", "qwen2", "gemma", "mixtral")},
    "gpt2": ["c_attn"],
    **{t: ["query", "value"] for t in ("bert", "roberta")},
    # encoder-decoders (task_type "SEQ_2_SEQ_LM"): every self- and cross-attention of both stacks
    **{t: ["q", "v"] for t in ("t5", "mt5")},
    **{t: ["q_proj", "v_proj"] for t in ("bart", "mbart", "marian")},
}
SEQ_CLS_HEADS = ("classifier", "score")


def _as_list(names: str | list[str] | tuple[str, ...]) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


#: Seconds one pattern from an adapter config may take to match one module path.
PATTERN_TIMEOUT = 1.0


def _pattern_match(pattern: str, path: str, setting: str, *, full: bool = True) -> regex.Match[str] | None:
    """``pattern`` (from an adapter config, i.e. from a file) matched against ``path``: with the ``regex`` engine,
    which avoids most runaway backtracking, under a time bound for what remains; a bad or runaway pattern is a
    ``ConfigError`` naming the setting."""
    try:
        match = regex.fullmatch if full else regex.match
        return match(pattern, path, timeout=PATTERN_TIMEOUT)
    except regex.error as exc:
        raise ConfigError(
            f"{setting} {pattern!r} is not a valid regular expression ({exc}); fix adapter_config.json"
        ) from exc
    except TimeoutError as exc:
        raise ConfigError(
            f"{setting} {pattern!r} takes over {PATTERN_TIMEOUT:g} s to match the module path {path!r} (nested "
            "repetition that backtracks without end); use a simpler pattern or a list of module names"
        ) from exc


def _name_matches(targets: str | list[str], path: str, setting: str = "target_modules") -> bool:
    if isinstance(targets, str):
        return _pattern_match(targets, path, setting) is not None
    return any(path == t or path.endswith("." + t) for t in targets)


def _saved_module_matches(names: str | list[str], path: str) -> bool:
    """``modules_to_save``: peft wraps every module whose path ends with a listed name (no ``.`` boundary:
    ``"layer_norm"`` takes ``self_attn_layer_norm`` too); a string is a regex matched against the full path."""
    if isinstance(names, str):
        return _pattern_match(names, path, "modules_to_save") is not None
    return any(path.endswith(name) for name in names)


# peft condenses a target_modules list this long into the fewest name suffixes that pick the same modules
# (so does this plugin: adapter_config.json then holds what peft's holds)
MIN_TARGETS_TO_CONDENSE = 20


def _suffixes(path: str) -> list[str]:
    """``a.b.c`` -> ``["c", "b.c", "a.b.c"]``: shortest first."""
    parts = path.split(".")
    return [".".join(parts[i:]) for i in range(len(parts) - 1, -1, -1)]


def _condense_targets(targets: list[str], others: list[str]) -> list[str]:
    """The fewest suffixes that match every path of ``targets`` and none of ``others``; ``targets`` if none do."""
    taken = {s for other in others for s in _suffixes(other)}
    chosen: set[str] = set()
    for path, suffixes in sorted(((p, _suffixes(p)) for p in set(targets)), key=lambda item: item[1]):
        for suffix in suffixes:
            if suffix in chosen or suffix in taken:
                continue
            if not any(path.endswith("." + c) for c in chosen):
                chosen.add(suffix)
                break
    return sorted(chosen) if chosen and len(chosen) < len(set(targets)) else targets


def _pattern_value(patterns: Mapping[str, Any], path: str, default: Any, setting: str) -> Any:
    if path in patterns:
        return patterns[path]
    for pattern, value in patterns.items():
        if _pattern_match(rf"(.*\.)?({pattern})$", path, f"{setting} key", full=False):
            return value
    return default


def _check_ranks_against_weights(config: LoraConfig, weights: Mapping[str, torch.Tensor], where: str) -> None:
    """Refuse a config whose ranks (``r``, ``rank_pattern``) exceed every rank the weights hold, before any LoRA
    matrix is built: a damaged ``r`` would otherwise size the new layers (10**9 rows) before the shapes are compared."""
    file_ranks = [int(t.shape[0]) for k, t in weights.items() if ".lora_A." in k and t.dim() >= 1]
    if not file_ranks:
        return  # no lora_A tensors: _copy_weights names what is missing
    configured = max([int(config.r), *(int(v) for v in (config.rank_pattern or {}).values())])
    if configured > max(file_ranks):
        raise AdapterError(
            f"{where}: r/rank_pattern ask for rank {configured}, but the adapter weights hold ranks up to "
            f"{max(file_ranks)}; adapter_config.json does not belong to these weights (or is damaged). Fix r/rank_pattern"
        )


def _layer_index_ok(config: LoraConfig, path: str) -> bool:
    wanted = config.layers_to_transform
    if wanted is None:
        return True
    wanted = [wanted] if isinstance(wanted, int) else list(wanted)
    patterns = _as_list(config.layers_pattern) if config.layers_pattern else [r"[^.]*"]
    for pattern in patterns:
        match = _pattern_match(rf".*\.{pattern}\.(\d+)\.", path, "layers_pattern", full=False)
        if match:
            return int(match.group(1)) in wanted
    return False


def _peft_type(config: Any) -> str:
    value = config.get("peft_type") if isinstance(config, Mapping) else getattr(config, "peft_type", "")
    return str(getattr(value, "value", value))  # peft's PeftType is an Enum


class LoraAdapters:
    """Named LoRA adapters on one model; which are active, enabled, merged."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.configs: dict[str, LoraConfig] = {}
        self._active: list[str] = []
        self._enabled = True
        self.renames = ModuleRenames.of(model)

    # -- the reference's module names (for models that declare reference_module_renames) -------
    def _reference_path(self, path: str) -> str:
        return self.renames.to_reference(path) if self.renames is not None else path

    def _our_path(self, path: str) -> str:
        return self.renames.from_reference(path) if self.renames is not None else path

    def _either_name(self, path: str, matches: Any) -> bool:
        """``matches(path)`` for our path or, where it differs, the reference's name for it: adapter settings
        written for either naming select the same modules."""
        if matches(path):
            return True
        reference = self._reference_path(path)
        return reference != path and bool(matches(reference))

    def _setting_for(self, patterns: Mapping[str, Any], path: str, default: Any, setting: str) -> Any:
        """A ``rank_pattern`` / ``alpha_pattern`` value for ``path``, its keys written for either naming."""
        value = _pattern_value(patterns, path, None, setting)
        reference = self._reference_path(path)
        if value is None and reference != path:
            value = _pattern_value(patterns, reference, None, setting)
        return default if value is None else value

    def _reference_names(self, name: str, paths: list[str]) -> list[str]:
        """A module name of an adapter setting (a path suffix) as the reference names what it selects here: each
        selected module's reference path cut to as many components as ``name`` has."""
        size = name.count(".") + 1
        found = {
            ".".join(self._reference_path(path).split(".")[-size:])
            for path in paths
            if path == name or path.endswith("." + name)
        }
        return sorted(found) or [name]

    def _reference_config(self, config: LoraConfig, name: str) -> LoraConfig:
        """``config`` with its module names as the reference's model has them, so peft on it loads the file."""
        if self.renames is None:
            return config
        paths = list(dict.fromkeys(p for p, _ in self._modules()))
        adapted = [p for p, m in self._wrappers(LoraLayer) if name in m.lora_A]

        def names(value: Any) -> Any:
            if value is None or isinstance(value, str):
                return value
            return list(dict.fromkeys(n for item in value for n in self._reference_names(item, paths)))

        def pattern_keys(patterns: Mapping[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for key, value in patterns.items():
                plain = regex.fullmatch(r"[\w.]+", key) is not None  # a name, not a regex: translatable
                out.update(dict.fromkeys(self._reference_names(key, paths) if plain else [key], value))
            return out

        targets = config.target_modules
        if isinstance(targets, str) and any(self._reference_path(p) != p for p in adapted):
            targets = sorted(self._reference_path(p) for p in adapted)  # a regex over our names: spelled out
        else:
            targets = names(targets)
        return attrs.evolve(
            config,
            target_modules=targets,
            exclude_modules=names(config.exclude_modules),
            modules_to_save=names(config.modules_to_save),
            rank_pattern=pattern_keys(config.rank_pattern or {}),
            alpha_pattern=pattern_keys(config.alpha_pattern or {}),
        )

    # -- the model's structure -----------------------------------------------------------------
    def _modules(self) -> Iterator[tuple[str, nn.Module]]:
        """Module paths as the base model names them: adapter wrappers stand for what they wrap."""

        def walk(prefix: str, module: nn.Module) -> Iterator[tuple[str, nn.Module]]:
            for name, child in module.named_children():
                path = f"{prefix}{name}"
                yield path, child
                if not isinstance(child, (LoraLayer, ModulesToSave)):
                    yield from walk(path + ".", child)

        return walk("", self.model)

    def _wrappers(self, kind: type) -> Iterator[tuple[str, Any]]:
        return ((p, m) for p, m in self._modules() if isinstance(m, kind))

    def _replace(self, path: str, new: nn.Module) -> None:
        parent_path, _, attr = path.rpartition(".")
        parent = self.model.get_submodule(parent_path) if parent_path else self.model
        setattr(parent, attr, new)

    def _output_layer_path(self) -> str | None:
        getter = getattr(self.model, "get_output_embeddings", None)
        output = getter() if getter is not None else None
        for path, module in self._modules():
            if output is not None and (module is output or getattr(module, "base_layer", None) is output):
                return path
        return None

    def linear_module_names(self) -> list[str]:
        return [p for p, m in self._modules() if is_linear_like(m)]

    def _resolve_targets(self, config: LoraConfig, where: str) -> tuple[LoraConfig, list[str]]:
        targets = config.target_modules
        model_type = getattr(getattr(self.model, "config", None), "model_type", None)
        if targets is None:
            if model_type not in DEFAULT_TARGETS:
                raise AdapterError(
                    f"{where}: target_modules is not set and there is no default for model_type {model_type!r}; "
                    f"pass target_modules=[...] (names, a regex, or 'all-linear'). "
                    f"The model's linear modules: {self._shown_linear()}"
                )
            targets = DEFAULT_TARGETS[model_type]
        if isinstance(targets, str) and targets.lower() == "all-linear":
            exclude = {self._output_layer_path()}
            if config.task_type == "SEQ_CLS":
                exclude |= {p for p in SEQ_CLS_HEADS if hasattr(self.model, p)}
            targets = sorted(p for p in self.linear_module_names() if p not in exclude)
        if not isinstance(targets, str) and len(targets) >= MIN_TARGETS_TO_CONDENSE:
            wanted = set(targets)
            paths = list(dict.fromkeys(p for p, _ in self._modules()))
            others = [p for p in paths if p not in wanted and not any(p.endswith("." + t) for t in wanted)]
            targets = _condense_targets(list(targets), others)
        config = attrs.evolve(config, target_modules=targets)
        chosen = []
        excluded = config.exclude_modules
        for path, module in self._modules():
            if not self._either_name(path, lambda p: _name_matches(targets, p)):
                continue
            if not self._either_name(path, lambda p: _layer_index_ok(config, p)):
                continue
            if excluded and self._either_name(path, lambda p: _name_matches(excluded, p, "exclude_modules")):
                continue
            if not is_linear_like(module):
                raise AdapterError(
                    f"{where}: target_modules selects '{path}', a {type(module).__name__}; LoRA here adapts linear "
                    f"layers (nn.Linear, Conv1D). Narrow target_modules; linear modules: {self._shown_linear()}"
                )
            chosen.append(path)
        if not chosen:
            raise AdapterError(
                f"{where}: target_modules={targets!r} matches no module of {type(self.model).__name__}"
                f"{' (the adapter was made for ' + config.base_model_name_or_path + ')' if config.base_model_name_or_path else ''}. "
                f"Its linear modules are: {self._shown_linear()}"
            )
        return config, chosen

    def _shown_linear(self) -> str:
        names = self.linear_module_names()
        suffixes = sorted({n.rpartition(".")[2] for n in names})
        return f"{', '.join(names[:12])}{' ...' if len(names) > 12 else ''} (names: {', '.join(suffixes)})"

    # -- adding and loading --------------------------------------------------------------------
    def _check_new_name(self, name: str, hotswap: bool = False) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise AdapterError(f"adapter_name={name!r}: use a non-empty name without dots")
        if name in self.configs and not hotswap:
            raise AdapterError(
                f"an adapter named '{name}' already exists on this model (loaded: {', '.join(self.configs)}); "
                f"pass another adapter_name=..., delete_adapter('{name}') first, or hotswap=True to replace its weights"
            )
        if hotswap and name not in self.configs:
            raise AdapterError(f"hotswap=True needs an existing adapter named '{name}'; loaded: {list(self.configs)}")

    def _coerce_config(self, config: Any) -> LoraConfig:
        if isinstance(config, LoraConfig):
            return config
        if isinstance(config, Mapping):
            return LoraConfig.from_dict(dict(config), "peft_config")
        if hasattr(config, "to_dict") and _peft_type(config) == "LORA":  # e.g. a peft.LoraConfig
            return LoraConfig.from_dict(
                {k: v for k, v in config.to_dict().items() if not k.startswith("_")}, type(config).__name__
            )
        raise AdapterError(
            f"adapter_config must be a LoraConfig (from microformers import LoraConfig), got {type(config).__name__}"
        )

    def _inject(self, config: LoraConfig, name: str, where: str) -> LoraConfig:
        config, paths = self._resolve_targets(config, where)
        transposed = [is_transposed(getattr(m, "base_layer", m)) for m in map(self.model.get_submodule, paths)]
        if any(transposed) and not config.fan_in_fan_out:
            logger.warning("fan_in_fan_out is set to True: the targeted layers store their weight (in, out) (Conv1D)")
            config = attrs.evolve(config, fan_in_fan_out=True)
        elif config.fan_in_fan_out and not any(transposed):
            logger.warning("fan_in_fan_out is set to False: the targeted layers are nn.Linear")
            config = attrs.evolve(config, fan_in_fan_out=False)
        ranks = {p: int(self._setting_for(config.rank_pattern, p, config.r, "rank_pattern")) for p in paths}
        _check_lora_fits(self.model, ranks, where)
        saved = config.modules_to_save
        if saved and not any(
            self._either_name(p, lambda q: _saved_module_matches(saved, q)) for p, _ in self._modules()
        ):
            raise AdapterError(
                f"{where}: modules_to_save={saved!r} matches no module of {type(self.model).__name__} (a trained copy "
                f"of a module that is not there would not be kept); its top-level modules: "
                f"{', '.join(name for name, _ in self.model.named_children())}"
            )
        for path in paths:
            layer = self.model.get_submodule(path)
            if not isinstance(layer, LoraLayer):
                layer = LoraLayer(layer)
                layer.active_adapters = list(self._active)
                layer.disabled = not self._enabled
                self._replace(path, layer)
            r = ranks[path]
            alpha = float(self._setting_for(config.alpha_pattern, path, config.lora_alpha, "alpha_pattern"))
            layer.add(name, r, config.scaling(r, alpha), float(config.lora_dropout), config.init_lora_weights)
        for path, module in list(self._modules()):
            if saved and self._either_name(path, lambda p: _saved_module_matches(saved, p)):
                if not isinstance(module, ModulesToSave):
                    module = ModulesToSave(module)
                    module.active_adapters = list(self._active)
                    module.disabled = not self._enabled
                    self._replace(path, module)
                module.add(name)
        return config

    def add_adapter(self, adapter_config: Any, adapter_name: str | None = None) -> None:
        """A fresh adapter (trainable, everything else frozen), made the active one."""
        name = "default" if adapter_name is None else adapter_name  # "" is refused by _check_new_name, not renamed
        config = self._coerce_config(adapter_config)
        self._check_new_name(name)
        base = _reloadable_base(getattr(self.model, "name_or_path", None) or None)
        config = attrs.evolve(config, base_model_name_or_path=base)
        self.configs[name] = self._inject(config, name, f"add_adapter({name!r})")
        self.set_adapter(name)

    def load_adapter(
        self,
        peft_model_id: str | os.PathLike[str] | None = None,
        adapter_name: str | None = None,
        peft_config: Any = None,
        adapter_state_dict: Mapping[str, torch.Tensor] | None = None,
        is_trainable: bool = False,
        hotswap: bool = False,
        adapter_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, list[str]]:
        """Load an adapter folder (or ``peft_config`` plus ``adapter_state_dict``) under ``adapter_name``."""
        name = "default" if adapter_name is None else adapter_name
        if peft_model_id is not None and not isinstance(peft_model_id, (str, os.PathLike)):
            raise ConfigError(
                f"load_adapter({peft_model_id!r:.60}): pass the adapter's folder or Hub repo id as a string or path"
            )
        hub_kwargs, rest = split_hub_kwargs({**(adapter_kwargs or {}), **kwargs})
        rest.pop("low_cpu_mem_usage", None)  # a memory hint only: adapter weights are copied into place either way
        for placement in ("device_map", "dtype", "torch_dtype"):
            if placement in rest and rest[placement] is None:
                del rest[placement]
        if rest:
            raise ConfigError(
                f"load_adapter() got unsupported arguments: {', '.join(sorted(rest))} (an adapter takes the device "
                "and dtype of the layers it wraps: move or cast the model instead)"
            )
        self._check_new_name(name, hotswap)
        folder = None
        if peft_config is None or adapter_state_dict is None:
            if peft_model_id is None:
                raise ConfigError("load_adapter needs a folder (peft_model_id) or peft_config and adapter_state_dict")
            folder = resolve_folder(
                peft_model_id, [ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, ADAPTER_BIN_NAME], **hub_kwargs
            )
        where = str(folder / ADAPTER_CONFIG_NAME) if folder is not None else "peft_config"
        if peft_config is None:
            config = PeftConfig.from_pretrained(folder)
        else:
            config = self._coerce_config(peft_config)
        if not isinstance(config, LoraConfig):
            raise AdapterError(f"{where}: peft_type {config.peft_type} is not LORA")
        if adapter_state_dict is None:
            adapter_state_dict = _read_weights(folder)
        config = attrs.evolve(config, inference_mode=not is_trainable)
        if hotswap:  # new weights for an existing adapter (e.g. resuming training from a checkpoint)
            self._copy_weights(name, adapter_state_dict, where)
            self.configs[name] = attrs.evolve(self.configs[name], inference_mode=not is_trainable)
            self._mark_trainable()
        else:
            _check_ranks_against_weights(config, adapter_state_dict, where)
            self.configs[name] = self._inject(config, name, where)
            try:
                self._copy_weights(name, adapter_state_dict, where)
            except Exception:
                self.delete_adapter(name)
                raise
            if not self._active:
                self.set_adapter(name)
            else:
                self._mark_trainable()
        if not is_trainable:
            self.model.eval()
        return {"missing_keys": [], "unexpected_keys": []}

    def _copy_weights(self, name: str, source: Mapping[str, torch.Tensor], where: str) -> None:
        state = self.model.state_dict(keep_vars=True)
        expected = self._saved_keys(name)  # saved key -> model key
        # a file made on the reference's model names its modules the reference's way: read as ours
        given = {self._our_path(k.removeprefix(PEFT_PREFIX)): k for k in source}
        missing = sorted(k for k in expected if k not in given)
        unexpected = sorted(k for k in given if k not in expected)
        if unexpected:
            raise AdapterError(
                f"{where}: the adapter weights hold tensors this model has no place for: {', '.join(unexpected[:6])}"
                f"{' ...' if len(unexpected) > 6 else ''}. The adapter was made for a different base model "
                f"({self.configs[name].base_model_name_or_path or 'unknown base'}) than this "
                f"{type(self.model).__name__}."
            )
        if missing:
            raise AdapterError(f"{where}: the adapter weights lack {', '.join(missing[:6])}; the file is incomplete")
        with torch.no_grad():
            for saved, model_key in expected.items():
                tensor = source[given[saved]]
                target = state[model_key]
                if tuple(tensor.shape) != tuple(target.shape):
                    raise AdapterError(
                        f"{where}: tensor '{given[saved]}' has shape {tuple(tensor.shape)} but this model needs "
                        f"{tuple(target.shape)} for it (rank r or layer size differs: the adapter does not fit "
                        f"this base model, or adapter_config.json's r/rank_pattern is wrong)"
                    )
                target.copy_(tensor.to(target.dtype))

    # -- which adapters run --------------------------------------------------------------------
    def _require(self, names: list[str]) -> None:
        unknown = [n for n in names if n not in self.configs]
        if unknown:
            raise AdapterError(f"no adapter named {', '.join(map(repr, unknown))}; loaded: {', '.join(self.configs)}")

    def set_adapter(self, adapter_name: str | list[str]) -> None:
        names = _as_list(adapter_name)
        self._require(names)
        self._active = names
        for _, module in self._wrappers((LoraLayer, ModulesToSave)):
            module.active_adapters = [n for n in names if n in module.adapter_names]
        self._mark_trainable()

    def _mark_trainable(self) -> None:
        """Only the active adapters' parameters train (and the biases their ``bias`` setting names)."""
        self.model.requires_grad_(False)
        for name in self._active:
            config = self.configs[name]
            if config.inference_mode:
                continue
            for _, module in self._wrappers(LoraLayer):
                if name in module.lora_A:
                    module.lora_A[name].requires_grad_(True)
                    module.lora_B[name].requires_grad_(True)
                    if config.bias == "lora_only" and getattr(module.base_layer, "bias", None) is not None:
                        module.base_layer.bias.requires_grad_(True)
            for _, module in self._wrappers(ModulesToSave):
                if name in module.modules_to_save:
                    module.modules_to_save[name].requires_grad_(True)
            if config.bias == "all":
                for _key, param in self._bias_params():
                    param.requires_grad_(True)

    def _bias_params(self) -> Iterator[tuple[str, nn.Parameter]]:
        for key, param in self.model.named_parameters():
            if (
                "bias" in key
                and ".lora_" not in key
                and ".modules_to_save." not in key
                and ".original_module." not in key
            ):
                yield key, param

    def disable_adapters(self) -> None:
        self._set_enabled(False)

    def enable_adapters(self) -> None:
        self._set_enabled(True)

    def _set_enabled(self, enabled: bool) -> None:
        self._enabled = enabled
        for _, module in self._wrappers((LoraLayer, ModulesToSave)):
            module.disabled = not enabled

    def active_adapters(self) -> list[str]:
        return list(self._active)

    def delete_adapter(self, adapter_names: str | list[str]) -> None:
        names = _as_list(adapter_names)
        self._require(names)
        for name in names:
            del self.configs[name]
        for path, module in list(self._wrappers((LoraLayer, ModulesToSave))):
            for name in names:
                module.remove(name)
            if not module.adapter_names:
                self._replace(path, module.base_layer if isinstance(module, LoraLayer) else module.original_module)
        remaining = [n for n in self._active if n in self.configs]
        if not remaining and self.configs:
            remaining = [next(iter(self.configs))]
            logger.warning("the active adapter was deleted; '%s' is active now", remaining[0])
        if self.configs:
            self.set_adapter(remaining)
        else:
            self._active = []
            self.model.__dict__.pop("_adapter_manager", None)

    # -- state and files -----------------------------------------------------------------------
    def _saved_keys(self, name: str) -> dict[str, str]:
        """Key in the adapter file (without ``base_model.model.``) -> key in the model's state dict."""
        config = self.configs[name]
        keys: dict[str, str] = {}
        for path, module in self._wrappers(LoraLayer):
            if name in module.lora_A:
                for part in ("lora_A", "lora_B"):
                    keys[f"{path}.{part}.weight"] = f"{path}.{part}.{name}.weight"
                if config.bias == "lora_only" and getattr(module.base_layer, "bias", None) is not None:
                    keys[f"{path}.base_layer.bias"] = f"{path}.base_layer.bias"
        if config.bias == "all":
            keys.update({k: k for k, _ in self._bias_params()})
        for path, module in self._wrappers(ModulesToSave):
            if name in module.modules_to_save:
                for key in module.modules_to_save[name].state_dict():
                    keys[f"{path}.{key}"] = f"{path}.modules_to_save.{name}.{key}"
        return keys

    def get_adapter_state_dict(
        self, adapter_name: str | None = None, state_dict: Mapping[str, torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        """The adapter's tensors under ``peft``'s names, without the ``base_model.model.`` prefix."""
        name = adapter_name or self._active[0]
        self._require([name])
        state = state_dict if state_dict is not None else self.model.state_dict()
        return {saved: state[key] for saved, key in self._saved_keys(name).items()}

    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        state_dict: Mapping[str, torch.Tensor] | None = None,
        is_main_process: bool = True,
        safe_serialization: bool = True,
        max_shard_size: int | str = "50GB",
        save_peft_format: bool = True,
        push_to_hub: bool = False,
        token: str | bool | None = None,
        **kwargs: Any,
    ) -> None:
        """Write the active adapter as ``adapter_config.json`` + its weights, nothing else.

        ``safe_serialization=False`` writes ``adapter_model.bin`` (as ``peft`` does); ``save_peft_format=False``
        drops the ``base_model.model.`` key prefix. Adapter weights are one file: one larger than
        ``max_shard_size`` is refused rather than split (``token`` only matters for uploads, which are refused).
        """
        refuse_push_to_hub(push_to_hub)
        if kwargs:
            raise ConfigError(
                f"save_pretrained() of a model with adapters does not take {', '.join(sorted(kwargs))}; "
                "drop it or check the spelling"
            )
        if not is_main_process:
            return
        if len(self._active) != 1:
            raise AdapterError(
                f"save_pretrained saves one adapter; active: {self._active}. Call set_adapter(name) first."
            )
        from microformers.formats import parse_size

        name = self._active[0]
        prefix = PEFT_PREFIX if save_peft_format else ""
        tensors = {
            prefix + self._reference_path(k): v.detach().to("cpu").contiguous().clone()
            for k, v in self.get_adapter_state_dict(name, state_dict).items()
        }
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if size > parse_size(max_shard_size):
            raise ConfigError(
                f"save_pretrained(max_shard_size={max_shard_size!r}): adapter '{name}' holds {size:,d} bytes of "
                "weights and adapter weights are written as one file (peft reads no sharded adapter); "
                "pass a larger max_shard_size"
            )
        config = self._reference_config(attrs.evolve(self.configs[name], inference_mode=True), name)
        with staged_folder(save_directory, replace=[ADAPTER_WEIGHTS_NAME, ADAPTER_BIN_NAME]) as staging:
            if safe_serialization:
                from safetensors.torch import save_file

                save_file(tensors, str(staging / ADAPTER_WEIGHTS_NAME), metadata={"format": "pt"})
            else:
                torch.save(tensors, staging / ADAPTER_BIN_NAME)
            config.save_pretrained(staging)

    # -- merging -------------------------------------------------------------------------------
    def merge_adapter(self, adapter_names: list[str] | None = None, safe_merge: bool = False) -> None:
        """Add the (active, or named) adapters' ``B @ A * scaling`` into the base weights."""
        if adapter_names is not None:
            self._require(adapter_names)
        for path, module in self._wrappers(LoraLayer):
            module.merge(adapter_names, safe_merge, where=path)

    def unmerge_adapter(self) -> None:
        for _, module in self._wrappers(LoraLayer):
            module.unmerge()

    def merge_and_unload(
        self, progressbar: bool = False, safe_merge: bool = False, adapter_names: list[str] | None = None
    ) -> nn.Module:
        """Merge the adapters into the base weights and remove every adapter module; returns the model."""
        self.merge_adapter(adapter_names, safe_merge)
        return self.unload()

    def unload(self) -> nn.Module:
        """Remove every adapter module without merging; returns the model."""
        for path, module in list(self._wrappers((LoraLayer, ModulesToSave))):
            if isinstance(module, LoraLayer):
                self._replace(path, module.base_layer)
            else:
                self._replace(path, module._target())
        self.configs.clear()
        self._active = []
        self.model.__dict__.pop("_adapter_manager", None)
        return self.model

    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        """(trainable, all) parameter counts; a quantized linear layer's weight (a buffer) counts in full."""
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        quantized = sum(
            m.in_features * m.out_features
            for m in self.model.modules()
            if is_linear_like(m)
            and not isinstance(m, LoraLayer)
            and not isinstance(getattr(m, "weight", None), nn.Parameter)
        )
        return trainable, sum(p.numel() for p in self.model.parameters()) + quantized

    def print_trainable_parameters(self) -> None:
        trainable, total = self.get_nb_trainable_parameters()
        print(
            f"trainable params: {trainable:,d} || all params: {total:,d} || trainable%: {100 * trainable / total:.4f}"
        )


def _check_lora_fits(model: nn.Module, ranks: Mapping[str, int], where: str) -> None:
    """Refuse ranks (``r``, ``rank_pattern``) whose LoRA matrices could not fit the memory of the device they would
    be made on, before any is allocated: a clear error instead of the allocator's."""
    needed: dict[torch.device, int] = {}
    for path, r in ranks.items():
        layer = model.get_submodule(path)
        base = getattr(layer, "base_layer", layer) if isinstance(layer, LoraLayer) else layer
        weight = getattr(base, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.device.type == "meta":
            continue
        size = weight.element_size() if weight.is_floating_point() else 4  # quantized bases get float32 LoRA
        needed[weight.device] = needed.get(weight.device, 0) + r * sum(weight.shape) * size
    for device, total in needed.items():
        available = _memory_bytes(device)
        if available is not None and total > available:
            largest = max(ranks.values())
            raise AdapterError(
                f"{where}: r/rank_pattern (up to rank {largest:,}) make LoRA matrices of {total / 2**30:,.1f} GiB "
                f"over {len(ranks)} modules, more than the {available / 2**30:,.1f} GiB of {device}; lower r "
                "(LoRA ranks are usually 4 to 256)"
            )


def _memory_bytes(device: torch.device) -> int | None:
    """The memory of ``device`` (the machine's RAM for the CPU), or None where it cannot be read."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    if device.type != "cpu":
        return None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def _reloadable_base(name_or_path: str | None) -> str | None:
    """What ``base_model_name_or_path`` should record so the adapter folder reloads its base: the model's own name,
    except for the folder of a packaged model alias (``smollm2-135m-instruct`` is a GGUF file inside a pip package;
    its folder alone does not say which file to load), which is recorded as the alias."""
    if not name_or_path or not Path(name_or_path).is_dir():
        return name_or_path
    from microformers.auto import aliases_of_folder

    aliases = aliases_of_folder(name_or_path)
    if len(aliases) == 1:
        return aliases[0]
    if aliases:
        logger.warning(
            "the base model's folder %s is behind several aliases (%s): adapter_config.json records the folder; "
            "set base_model_name_or_path to the alias you loaded before sharing the adapter",
            name_or_path,
            ", ".join(aliases),
        )
    return name_or_path


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """``adapter_model.safetensors``, else peft's pickled ``adapter_model.bin`` (tensors only: weights_only)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = folder / ADAPTER_WEIGHTS_NAME
    legacy = folder / ADAPTER_BIN_NAME
    if not path.is_file() and legacy.is_file():
        try:
            return dict(torch.load(legacy, map_location="cpu", weights_only=True))
        except Exception as exc:  # unpickling errors have no common base class
            raise AdapterError(f"{legacy} is not a readable adapter weights file: {exc}") from exc
    if not path.is_file():
        raise AdapterError(f"{path} not found; an adapter folder holds {ADAPTER_WEIGHTS_NAME} (or {ADAPTER_BIN_NAME})")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise AdapterError(f"{path} is not a readable safetensors file: {exc}") from exc

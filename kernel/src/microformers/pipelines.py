"""Pipelines: task name -> a pipeline class registered by a plugin.

The kernel knows no task and no pipeline base class. Plugins register tasks through the
``register_pipelines`` hook (or in-process with ``PIPELINE_REGISTRY.register_pipeline``); :func:`pipeline`
finds the task, loads the model with the Auto head the task asked for (refusing a checkpoint or model
with another head), and builds the class. ``Pipeline`` / ``ChunkPipeline`` (the run loop, batching and
collation) come from the ``microformers-pipelines`` plugin, exported as ``microformers.Pipeline``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from . import auto
from .configuration import PretrainedConfig
from .devices import check_device, check_device_map
from .errors import ConfigError
from .hub import HUB_KWARGS
from .plugins import IN_PROCESS, Registration, ref_name, registry
from .weights import format_arguments

KIND = "pipelines"


def __getattr__(name: str) -> Any:
    """``microformers.pipelines.Pipeline`` (old path): the base classes now come from a plugin's exports."""
    if name in ("Pipeline", "ChunkPipeline"):
        import microformers

        return getattr(microformers, name)
    raise AttributeError(f"module 'microformers.pipelines' has no attribute {name!r}")


# -- registration ----------------------------------------------------------------------------------
class PipelineRegistry:
    """In-process task registration; feeds the same registry as the ``register_pipelines`` hook."""

    def register_pipeline(
        self,
        task: str,
        pipeline_class: type | str,
        pt_model: Any = None,
        default: Any = None,
        type: str | None = None,
        aliases: Sequence[str] = (),
        model_class: str | Sequence[str] | None = None,
    ) -> None:
        """Register ``task``. ``pt_model`` is an Auto class (or a tuple of them, or their names) used to load
        a model given by name; ``default`` a model id/alias (also ``{"pt": ("id", "revision")}``)."""
        if not task or not isinstance(task, str):
            raise ConfigError(f"register_pipeline: task must be a non-empty string, got {task!r}")
        heads = _head_names(model_class if model_class is not None else pt_model)
        registry.add(
            KIND,
            task,
            pipeline_class,
            IN_PROCESS,
            model_class=heads,
            default_model=_default_model_id(default),
            aliases=tuple(aliases),
            type=type,
        )

    def get_supported_tasks(self) -> list[str]:
        return sorted({*registry.names(KIND), *(a for r in registry.all(KIND) for a in r.meta.get("aliases", ()))})

    def check_task(self, task: str) -> tuple[str, Registration]:
        """``(canonical task name, registration)`` for a task or alias; a clear error if none is installed."""
        reg = registry.get(KIND, task)
        if reg is not None:
            return task, reg
        for candidate in registry.all(KIND):
            if task in candidate.meta.get("aliases", ()):
                return candidate.name, candidate
        for candidate in registry.all(KIND):
            # a parameterised task name (translation_en_to_de) keeps its name: the pipeline reads it
            if any(re.fullmatch(pattern, task) for pattern in candidate.meta.get("task_patterns", ())):
                return task, candidate
        raise registry.missing_error(KIND, task, what="pipeline task")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {
            reg.name: {"impl": reg.ref, "plugin": reg.plugin, **reg.meta}
            for reg in (registry.get(KIND, name) for name in registry.names(KIND))
            if reg is not None
        }


PIPELINE_REGISTRY = PipelineRegistry()


def _head_names(model_class: Any) -> tuple[str, ...]:
    if model_class is None:
        return ()
    if isinstance(model_class, (list, tuple)):
        return tuple(name for item in model_class for name in _head_names(item))
    if isinstance(model_class, str):
        return (model_class,)
    return (getattr(model_class, "auto_name", None) or model_class.__name__,)


def _default_model_id(default: Any) -> str | None:
    if default is None or isinstance(default, str):
        return default
    if isinstance(default, Mapping):
        for key in ("pt", "model"):
            if key in default:
                return _default_model_id(default[key])
    if isinstance(default, (tuple, list)) and default:
        return _default_model_id(default[0])
    raise ConfigError(f"default={default!r}: give a model id or alias, or {{'pt': ('model-id', 'revision')}}")


# -- pipeline() ------------------------------------------------------------------------------------
def pipeline(
    task: str | None = None,
    model: Any = None,
    config: Any = None,
    tokenizer: Any = None,
    *,
    device: Any = None,
    dtype: Any = None,
    batch_size: int | None = None,
    trust_remote_code: bool | None = None,
    model_kwargs: dict[str, Any] | None = None,
    pipeline_class: type | None = None,
    torch_dtype: Any = None,
    device_map: Any = None,
    **kwargs: Any,
) -> Any:
    """Build the pipeline for ``task`` (``microformers.pipeline("fill-mask", model="folder")``).

    ``model`` is a folder, Hub id, alias or model object; when omitted the task's default model is used.
    Remaining keyword arguments are the task's options (``top_k=...``) or loading arguments
    (``revision``, ``gguf_file``, ...).
    """
    framework = kwargs.pop("framework", None)
    if framework not in (None, "pt"):
        raise ConfigError(
            f"framework={framework!r}: microformers runs PyTorch models only; drop framework= or pass framework='pt'"
        )
    if device is not None:  # before any weights are read: a missing device fails fast
        check_device(device, "device")
    check_device_map(device_map)
    load_kwargs = {k: kwargs.pop(k) for k in (*HUB_KWARGS, *format_arguments()) if k in kwargs}
    if trust_remote_code is not None:
        load_kwargs["trust_remote_code"] = trust_remote_code
    if isinstance(model, (str, os.PathLike)) and not isinstance(config, PretrainedConfig):
        config = auto.AutoConfig.from_pretrained(str(config or model), **load_kwargs)
    config = config if isinstance(config, PretrainedConfig) else getattr(model, "config", None)
    if task is None:
        task = _task_of(model, config)
    if torch_dtype is not None:  # the reference's older name
        if dtype is not None and dtype != torch_dtype:
            raise ConfigError(f"pipeline(): pass dtype= or torch_dtype= (the same thing), not both ({dtype!r}, {torch_dtype!r})")
        dtype = torch_dtype
    if device_map is not None:
        if device is not None or (model is not None and not isinstance(model, (str, os.PathLike))):
            raise ConfigError("pipeline(device_map=...) places a model loaded from a name or folder; pass device= instead")
        model_kwargs = {**(model_kwargs or {}), "device_map": device_map}
    custom = (getattr(config, "custom_pipelines", None) or {}).get(task)
    if custom is not None:  # saved by Pipeline.save_pretrained: its code runs only with trust_remote_code=True
        source = model if isinstance(model, (str, os.PathLike)) else getattr(model, "name_or_path", None)
        if not source and pipeline_class is None:
            raise ConfigError(
                f"config.custom_pipelines['{task}'] names code kept in a model folder, but no folder or Hub id was "
                "given to load it from: pass model='<folder or Hub id>' (or pipeline_class=)"
            )
        heads = _head_names(custom.get("pt")) or ("AutoModel",)
        cls = pipeline_class or _custom_class(custom, task, source, trust_remote_code, load_kwargs)
        default_model = reference_default = None
    else:
        task, reg = PIPELINE_REGISTRY.check_task(task)
        heads = _head_names(reg.meta.get("model_class")) or ("AutoModel",)
        cls = pipeline_class or reg.load()
        default_model = reg.meta.get("default_model")
        reference_default = reg.meta.get("reference_default_model")
    if model is None:
        model = default_model
        if model is None and cls.needs_model:
            fetch = (
                f"The reference's default is {reference_default}: fetch it once where there is network "
                f"(hf download {reference_default} --local-dir {reference_default.rsplit('/', 1)[-1]}) and pass "
                f"model='{reference_default.rsplit('/', 1)[-1]}', or pass any other"
                if reference_default
                else "Pass"
            )
            raise ConfigError(
                f"task '{task}' has no packaged default model. "
                f"{fetch} model='<folder, Hub id or alias>' with an {' or '.join(heads)} head"
            )
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        model_name = str(model)
        model = _load_model(model_name, task, heads, config, dtype, load_kwargs, model_kwargs or {})
        dtype = None
        if tokenizer is None and cls.needs_tokenizer:
            tokenizer = model_name
    elif model is not None:
        check_model_head(model, task, heads)
        if tokenizer is None and cls.needs_tokenizer:
            tokenizer = _tokenizer_source_of(model)
    if isinstance(tokenizer, str) or hasattr(tokenizer, "__fspath__"):
        tokenizer_kwargs = {k: v for k, v in load_kwargs.items() if k != "subfolder"}
        tokenizer = auto.AutoTokenizer.from_pretrained(str(tokenizer), **tokenizer_kwargs)
    return cls(model, tokenizer, task=task, device=device, dtype=dtype, batch_size=batch_size, **kwargs)


def _custom_class(info: Any, task: str, source: Any, trust_remote_code: Any, load_kwargs: dict[str, Any]) -> Any:
    """The class a folder's ``config.json`` ``custom_pipelines[task]["impl"]`` names, imported as remote code."""
    from .remote import load_remote_class

    if not isinstance(info, Mapping) or not isinstance(info.get("impl"), str):
        raise ConfigError(f"{source}: custom_pipelines['{task}'] in config.json needs an 'impl': 'module.ClassName'")
    hub_kwargs = {k: v for k, v in load_kwargs.items() if k in HUB_KWARGS}
    return load_remote_class(info["impl"], source, trust_remote_code, hub_kwargs, {}, f"pipeline task '{task}'")


def _task_of(model: Any, config: Any) -> str:
    """The task a model's config names (one ``custom_pipelines`` entry) or its saved head fits, else an error."""
    found: list[str] = []
    if model is not None:
        if not isinstance(config, PretrainedConfig):
            raise ConfigError(
                f"pipeline(): pass a task, e.g. pipeline('text-generation', model=...); {type(model).__name__} "
                "has no config to infer one from"
            )
        custom = getattr(config, "custom_pipelines", None) or {}
        architectures = set(getattr(config, "architectures", None) or ())
        found = list(custom) if len(custom) == 1 else [
            reg.name for reg in registry.all(KIND)
            if architectures & _registered_head_names(config.model_type, _head_names(reg.meta.get("model_class")))
        ]
        if len(found) == 1:
            return found[0]
    hint = f"tasks that fit this model: {', '.join(found)}" if found else "installed tasks: " + (
        ", ".join(PIPELINE_REGISTRY.get_supported_tasks()) or "none"
    )
    raise ConfigError(f"pipeline(): pass a task, e.g. pipeline('text-generation', model=...); {hint}")


def _load_model(
    name: str,
    task: str,
    heads: tuple[str, ...],
    config: Any,
    dtype: Any,
    load_kwargs: dict[str, Any],
    model_kwargs: dict[str, Any],
) -> Any:
    if not isinstance(config, PretrainedConfig):  # the task's default model
        config = auto.AutoConfig.from_pretrained(name, **load_kwargs)
    check_checkpoint_head(config, task, heads, name)
    kwargs = {**load_kwargs, **model_kwargs}
    if dtype is not None:
        kwargs["dtype"] = dtype
    errors: list[str] = []
    for head in heads:
        try:
            return auto.auto_class(head).from_pretrained(name, config=config, **kwargs)
        except ConfigError as exc:  # this head is not available for the model_type; try the next
            if len(heads) == 1:
                raise ConfigError(f"task '{task}' cannot use model '{name}': {exc}") from exc
            errors.append(f"{head}: {exc}")
    raise ConfigError(f"task '{task}' cannot use model '{name}': " + "; ".join(errors))


def _registered_head_names(model_type: str | None, heads: tuple[str, ...]) -> set[str]:
    names: set[str] = set()
    for head in heads:
        reg = registry.get("models", (model_type, head))
        if reg is not None:
            names.add(ref_name(reg.ref))
    return names


def check_checkpoint_head(config: Any, task: str, heads: tuple[str, ...], name: str) -> None:
    """Refuse a checkpoint saved with a different head than the task needs (its head would be random)."""
    architectures = list(getattr(config, "architectures", None) or ())
    if not architectures or "AutoModel" in heads:
        return
    model_type = getattr(config, "model_type", None)
    fitting = _registered_head_names(model_type, heads)
    known = all(registry.get("architectures", arch) is not None for arch in architectures)
    if fitting and known and not fitting & set(architectures):
        raise ConfigError(
            f"task '{task}' needs a model with a {' or '.join(heads)} head, but '{name}' was saved as "
            f"{', '.join(architectures)} (its config.json 'architectures'); loading it for this task would "
            f"leave the head untrained. Use a checkpoint trained for '{task}' ({', '.join(sorted(fitting))})."
        )


def check_model_head(model: Any, task: str, heads: tuple[str, ...]) -> None:
    """Refuse a model object whose class is not the registered head for the task."""
    if "AutoModel" in heads or not callable(getattr(model, "parameters", None)):
        return
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    classes = []
    for head in heads:
        reg = registry.get("models", (model_type, head))
        if reg is not None:
            classes.append(reg.load())
    if classes and not isinstance(model, tuple(classes)):
        raise ConfigError(
            f"task '{task}' needs a model with a {' or '.join(heads)} head ({', '.join(c.__name__ for c in classes)}), "
            f"got {type(model).__name__}; load it with {heads[0]}.from_pretrained(...)"
        )


def _tokenizer_source_of(model: Any) -> str | None:
    name = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "name_or_path", None)
    return str(name) if name else None


def supported_tasks() -> list[str]:
    return PIPELINE_REGISTRY.get_supported_tasks()


__all__ = [
    "PIPELINE_REGISTRY",
    "PipelineRegistry",
    "check_checkpoint_head",
    "check_model_head",
    "pipeline",
    "supported_tasks",
]

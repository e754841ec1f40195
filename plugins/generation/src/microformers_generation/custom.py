"""``custom_generate``: run generation code that is not one of the installed strategies.

A string names either a registered strategy, or a folder (local, or a Hub repository) holding
``custom_generate/generate.py`` whose ``generate(model, **generate_arguments)`` replaces
``generate`` entirely. Running such a file requires ``trust_remote_code=True``; its optional
``custom_generate/requirements.txt`` is checked with ``packaging`` before anything is imported.
A callable is the decoding loop itself: it receives the prepared inputs, processors and criteria.
The kernel resolves registered names itself and hands every other value to :data:`custom_generate`.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from microformers import FileMissingError, GenerationConfig, GenerationError, RemoteCodeError, registry
from microformers.generation import select_strategy
from microformers.remote import NAMESPACE, check_requirements, import_isolated

HUB_KWARGS = ("revision", "cache_dir", "local_files_only", "token", "subfolder", "force_download")
GENERATE_FILE = "custom_generate/generate.py"
REQUIREMENTS_FILE = "custom_generate/requirements.txt"

_loaded: dict[tuple[str, float], ModuleType] = {}


def resolve_custom_generate(
    value: str | os.PathLike[str], trust_remote_code: bool | None, hub_kwargs: dict[str, Any]
) -> Callable[..., Any]:
    """The ``generate`` function of a local folder or Hub repository."""
    name = os.fspath(value)
    folder = Path(name).expanduser()
    if folder.is_dir():
        return load_generate_function(folder, trust_remote_code, origin=name)
    installed = ", ".join(map(str, registry.names("generation_strategies"))) or "none"
    if isinstance(value, os.PathLike) or name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise GenerationError(
            f"custom_generate={name!r} is neither an installed generation strategy (installed: {installed}) "
            f"nor an existing folder containing {GENERATE_FILE}"
        )
    from microformers.hub import resolve_folder

    try:
        downloaded = resolve_folder(name, ["custom_generate/*"], **hub_kwargs)
    except FileMissingError as exc:
        raise GenerationError(
            f"custom_generate={name!r} is not an installed generation strategy (installed: {installed}), not a "
            f"local folder, and could not be fetched as a Hub repository: {exc}"
        ) from exc
    return load_generate_function(Path(downloaded), trust_remote_code, origin=name)


def load_generate_function(folder: Path, trust_remote_code: bool | None, origin: str) -> Callable[..., Any]:
    """The ``generate`` function of ``folder/custom_generate/generate.py`` (consent and requirements checked)."""
    path = folder / GENERATE_FILE
    if not path.is_file():
        raise GenerationError(
            f"custom_generate={origin!r}: {path} does not exist; a custom generation folder needs "
            f"{GENERATE_FILE} defining generate(model, **kwargs)"
        )
    if trust_remote_code is not True:
        raise RemoteCodeError(
            f"custom_generate={origin!r} would run the code in {path}, which replaces generate(). Read it, and "
            "if you trust it pass trust_remote_code=True to generate()."
        )
    check_requirements(folder / REQUIREMENTS_FILE)
    module = _import_folder_module(path)
    function = getattr(module, "generate", None)
    if not callable(function):
        raise RemoteCodeError(f"{path} does not define a function generate(model, **kwargs)")
    return function


def _import_folder_module(path: Path) -> ModuleType:
    key = (str(path.resolve()), path.stat().st_mtime)
    module = _loaded.get(key)
    if module is None:
        # A private package per folder, so generate.py can import its sibling files relatively.
        package = f"{NAMESPACE}.custom_generate_{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}"
        module = import_isolated(package, path.parent, path.stem, {path.name: path})
        _loaded[key] = module
    return module


class CustomGenerate:
    """The strategy the kernel selects for a ``custom_generate`` that is not a registered name."""

    name = "custom_generate"

    def applies(self, config: GenerationConfig) -> bool:
        return False  # only chosen through custom_generate=

    def __call__(
        self,
        model: Any,
        inputs: Any,
        *,
        generation_config: GenerationConfig,
        logits_processor: Any = None,
        stopping_criteria: Any = None,
        streamer: Any = None,
        model_kwargs: dict[str, Any],
    ) -> Any:
        from .prepare import prepare
        from .strategies import run_loop

        model_kwargs = dict(model_kwargs)
        value = model_kwargs.pop("custom_generate")
        trust_remote_code = model_kwargs.pop("trust_remote_code", None)
        if isinstance(value, (str, os.PathLike)):
            hub_kwargs = {k: model_kwargs.pop(k) for k in HUB_KWARGS if k in model_kwargs}
            function = resolve_custom_generate(value, trust_remote_code, hub_kwargs)
            # The call's own settings (what differs from the model's config) are passed as keywords too.
            base = model.generation_config
            settings = {k: v for k, v in generation_config.to_dict().items() if getattr(base, k, None) != v}
            return function(
                **settings,
                model=model,
                inputs=inputs,
                generation_config=generation_config,
                logits_processor=logits_processor,
                stopping_criteria=stopping_criteria,
                streamer=streamer,
                **model_kwargs,
            )
        if not callable(value):
            raise GenerationError(
                f"custom_generate must be a callable, a strategy name or a folder, not {type(value).__name__}"
            )
        prepared = prepare(
            model,
            inputs,
            generation_config=generation_config,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
            streamer=streamer,
            model_kwargs=model_kwargs,
            builders=select_strategy(generation_config),
        )

        def loop(model: Any, input_ids: Any, *, streamer: Any, model_kwargs: dict[str, Any], **kwargs: Any) -> Any:
            if streamer is not None and _accepts_keyword(value, "streamer"):
                kwargs["streamer"] = streamer
            return value(model, input_ids, **kwargs, **model_kwargs)

        return run_loop(loop, model, prepared)


def _accepts_keyword(function: Any, name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


custom_generate = CustomGenerate()

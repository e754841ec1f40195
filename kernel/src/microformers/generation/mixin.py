"""``GenerationMixin``: ``model.generate`` and the model's ``generation_config``.

``generate`` merges the settings (the given or model's ``GenerationConfig`` overridden by keyword
arguments), selects a strategy from the registry (kind ``generation_strategies``) and calls it with
the raw inputs; the strategy prepares inputs, processors and criteria and runs the loop
(``microformers-generation`` provides the standard ones and the preparation they share).

Selection: ``custom_generate`` naming a registered strategy, else the ``custom_generate`` strategy
for any other ``custom_generate`` value (a callable or a folder); ``generation_config.strategy`` by
name; otherwise the highest-priority registered strategy whose ``applies(config)`` is true.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..errors import GenerationError
from ..plugins import registry
from ..protocols import GenerationStrategy
from .configuration import GENERATION_CONFIG_NAME, GenerationConfig
from .scores import compute_transition_scores


class GenerationMixin:
    """Gives models ``generate()`` and a ``generation_config`` (from ``generation_config.json`` or the config)."""

    # Whether save_pretrained writes generation_config.json; None: decided from the class name.
    _can_generate: ClassVar[bool | None] = None

    @property
    def generation_config(self) -> GenerationConfig:
        config = self.__dict__.get("_generation_config")
        if config is None:
            config = GenerationConfig.from_model_config(self.config)
            self.__dict__["_generation_config"] = config
        return config

    @generation_config.setter
    def generation_config(self, value: GenerationConfig | None) -> None:
        if value is not None and not isinstance(value, GenerationConfig):
            raise GenerationError(f"generation_config must be a GenerationConfig, got {type(value).__name__}")
        self.__dict__["_generation_config"] = value

    @classmethod
    def can_generate(cls) -> bool:
        if cls._can_generate is not None:
            return cls._can_generate
        name = cls.__name__
        return any(part in name for part in ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration"))

    def _load_generation_config(self, folder: str | os.PathLike[str], hub_kwargs: dict[str, Any]) -> None:
        path = Path(folder) / hub_kwargs.get("subfolder", "") / GENERATION_CONFIG_NAME
        if path.is_file():
            self.generation_config = GenerationConfig.from_pretrained(path.parent)
        else:
            self.generation_config = GenerationConfig.from_model_config(self.config)

    def _save_generation_config(self, folder: str | os.PathLike[str]) -> None:
        if self.can_generate() or "_generation_config" in self.__dict__:
            self.generation_config.save_pretrained(folder)

    # -- what models with fast decoding paths override ----------------------------------------------
    def make_static_cache(self, max_cache_len: int) -> Any:
        """A preallocated KV cache for ``max_cache_len`` positions (``cache_implementation="static"``)."""
        raise GenerationError(f"{type(self).__name__} offers no static cache; drop cache_implementation='static'")

    def compile_decode_step(self, **compile_options: Any) -> None:
        """Compile the one-token decode step (``compile_config``)."""
        raise GenerationError(f"{type(self).__name__} has no compiled decode step; drop compile_config")

    def cache_needs_recompute(self, past_length: int, total_length: int) -> bool:
        """Whether cached states of ``past_length`` positions are stale once the sequence is ``total_length``
        long, so ``generate`` must rerun every position into a fresh cache (Phi-3's LongRoPE)."""
        return False

    def compute_transition_scores(
        self,
        sequences: torch.Tensor,
        scores: tuple[torch.Tensor, ...],
        beam_indices: torch.Tensor | None = None,
        normalize_logits: bool = False,
    ) -> torch.Tensor:
        """The score of each generated token, ``(rows, generated)``, from ``generate``'s ``scores``/``logits``.

        ``beam_indices`` (beam search) says which row of ``scores`` each token came from (``-1``:
        past the end, scored 0); ``normalize_logits`` log-softmaxes each step first.
        """
        return compute_transition_scores(sequences, scores, beam_indices, normalize_logits)

    # -- generate --------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        inputs: torch.Tensor | None = None,
        generation_config: GenerationConfig | None = None,
        logits_processor: Iterable[Any] | None = None,
        stopping_criteria: Iterable[Any] | None = None,
        streamer: Any = None,
        custom_generate: str | os.PathLike[str] | Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Generate token ids after ``inputs`` (or ``input_ids=``); see the module docstring.

        Keyword arguments that are generation settings override ``generation_config`` (or the
        model's); the rest go to the strategy as ``model_kwargs`` (model inputs, ``tokenizer=``,
        ``assistant_model=`` ...). Returns the sequences, or an output object with ``sequences``,
        ``scores`` ... when ``return_dict_in_generate=True``.
        """
        config, model_kwargs = self._merge_generation_config(generation_config, kwargs)
        strategy = select_strategy(config, custom_generate)
        if custom_generate is not None:
            model_kwargs["custom_generate"] = custom_generate
        return strategy(
            self,
            inputs,
            generation_config=config,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
            streamer=streamer,
            model_kwargs=model_kwargs,
        )

    def _merge_generation_config(
        self, generation_config: GenerationConfig | None, kwargs: dict[str, Any]
    ) -> tuple[GenerationConfig, dict[str, Any]]:
        """The per-call config (given or model's, overridden by kwargs, validated) and the other kwargs."""
        if generation_config is None:
            config = copy.deepcopy(self.generation_config)
        elif isinstance(generation_config, GenerationConfig):
            config = generation_config.merged_with(self.generation_config)
        else:
            raise GenerationError(
                f"generation_config must be a GenerationConfig, got {type(generation_config).__name__}"
            )
        model_kwargs = config.update(**kwargs)
        config.validate()
        return config, model_kwargs


def select_strategy(config: GenerationConfig, custom_generate: Any = None) -> GenerationStrategy:
    """The strategy ``generate`` runs for ``config`` (see the module docstring for the order)."""
    if custom_generate is not None:
        if isinstance(custom_generate, str) and registry.get("generation_strategies", custom_generate) is not None:
            return _require_strategy(custom_generate)
        return _require_strategy("custom_generate")
    if config.strategy:
        return _require_strategy(config.strategy)
    registrations = sorted(registry.all("generation_strategies"), key=lambda r: -int(r.meta.get("priority", 0)))
    for registration in registrations:
        strategy = _instance(registration.load(), registration.name)
        applies = getattr(strategy, "applies", None)
        if applies is not None and applies(config):
            return _callable_strategy(strategy, registration.name)
    installed = ", ".join(map(str, registry.names("generation_strategies"))) or "none"
    raise GenerationError(
        f"no installed generation strategy applies to these settings (installed: {installed}). The standard "
        "ones (greedy, sampling, beam search) come with: pip install microformers-generation"
    )


_INSTANCES: dict[type, Any] = {}


def as_strategy(registered: Any, name: str) -> GenerationStrategy:
    """A registered strategy object, or one instance (made once, without arguments) of a registered class; either
    must be callable as ``strategy(model, inputs, *, generation_config, ...)`` (a :class:`GenerationStrategy`)."""
    return _callable_strategy(_instance(registered, name), name)


def _instance(registered: Any, name: str) -> Any:
    if not isinstance(registered, type):
        return registered
    if registered not in _INSTANCES:
        try:
            _INSTANCES[registered] = registered()
        except TypeError as exc:
            raise GenerationError(
                f"generation strategy {name!r} is registered as the class {registered.__name__}, which cannot be "
                f"made without arguments ({exc}); register an instance instead"
            ) from exc
    return _INSTANCES[registered]


def _callable_strategy(strategy: Any, name: str) -> GenerationStrategy:
    if not callable(strategy):
        raise GenerationError(
            f"generation strategy {name!r} is a {type(strategy).__name__} object, which has no __call__: generate() "
            "calls a strategy as strategy(model, inputs, *, generation_config, logits_processor, stopping_criteria, streamer, "
            "model_kwargs). Define __call__ (or subclass microformers_generation.Strategy and implement decode)"
        )
    return strategy


def _require_strategy(name: str) -> GenerationStrategy:
    return as_strategy(registry.require("generation_strategies", name, what="generation strategy"), name)

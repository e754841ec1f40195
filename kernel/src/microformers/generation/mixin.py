"""``GenerationMixin``: ``model.generate`` and the model's ``generation_config``.

``generate`` only prepares: it merges the settings, validates them, checks and expands the inputs,
picks a strategy from the registry (kind ``generation_strategies``) and builds the default logits
processors and stopping criteria, then hands everything to the strategy, which runs the loop.

Strategy choice, in order: ``custom_generate`` (a callable, a registered name, or a folder with
``custom_generate/generate.py``); ``generation_config.strategy``; any non-standard registered
strategy whose ``applies(config)`` is true (by name order); the standard one for the config,
``beam_search`` (``num_beams > 1``), ``sample`` (``do_sample``) or ``greedy``.

Default processors and criteria come from the chosen strategy's ``build_logits_processor`` /
``build_stopping_criteria`` when it has them, otherwise from the standard strategy for the config
(``microformers-generation`` provides them); without either, only the ones passed in are used.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..errors import GenerationError
from ..plugins import registry
from .configuration import DEFAULTS, GENERATION_CONFIG_NAME, GenerationConfig
from .logits_process import LogitsProcessorList
from .stopping_criteria import StoppingCriteriaList

logger = logging.getLogger("microformers")

STANDARD_STRATEGIES = ("greedy", "sample", "beam_search")
_HUB_KWARGS = ("revision", "cache_dir", "local_files_only", "token", "subfolder", "force_download")


def merge_with_defaults(defaults: Iterable[Any], custom: Iterable[Any] | None, list_type: type[list]) -> list:
    """Defaults with any of the same type replaced by the caller's one, then the caller's others appended."""
    custom = list(custom or ())
    merged = list_type()
    for default in defaults:
        replacement = next((c for c in custom if type(c) is type(default)), None)
        if replacement is not None:
            logger.warning(
                "generate() was given a %s although its settings already create one; the one passed in is used",
                type(default).__name__,
            )
        merged.append(replacement if replacement is not None else default)
    merged.extend(c for c in custom if not any(c is m for m in merged))
    return merged


class GenerationMixin:
    """Gives models ``generate()`` and a ``generation_config`` (from ``generation_config.json`` or the config)."""

    # Whether save_pretrained writes generation_config.json; None: decided from the class name.
    _can_generate: ClassVar[bool | None] = None

    # -- the generation config -------------------------------------------------------------------
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
        model's); ``tokenizer=`` is needed for ``stop_strings``; ``trust_remote_code=True`` allows a
        ``custom_generate`` folder's code to run; anything else is passed to the model's forward.
        Returns the sequences ``(batch * num_return_sequences, length)``, or an output object with
        ``sequences``, ``scores``, ``logits`` ... when ``return_dict_in_generate=True``.
        """
        trust_remote_code = kwargs.pop("trust_remote_code", None)
        strategy: Any = None
        if isinstance(custom_generate, (str, os.PathLike)):
            from .custom import resolve_custom_generate

            hub_kwargs = {k: kwargs.pop(k) for k in _HUB_KWARGS if k in kwargs}
            kind, loaded = resolve_custom_generate(custom_generate, trust_remote_code, hub_kwargs)
            if kind == "function":
                return loaded(
                    model=self,
                    inputs=inputs,
                    generation_config=generation_config,
                    logits_processor=logits_processor,
                    stopping_criteria=stopping_criteria,
                    streamer=streamer,
                    **kwargs,
                )
            strategy = loaded
        elif custom_generate is not None and not callable(custom_generate):
            raise GenerationError(
                f"custom_generate must be a callable, a strategy name or a folder, not {type(custom_generate).__name__}"
            )

        tokenizer = kwargs.pop("tokenizer", None)
        config, model_kwargs, has_default_max_length = self._prepare_generation_config(generation_config, kwargs)
        if strategy is None and custom_generate is None:
            strategy = select_strategy(config)

        input_ids, model_kwargs = self._prepare_inputs(inputs, config, model_kwargs)
        if streamer is not None and (config.num_beams or 1) > 1:
            raise GenerationError("streamer= works with one sequence per step; it cannot be used with num_beams > 1")
        expand = max(config.num_beams, config.num_return_sequences)
        if expand > 1:
            input_ids = input_ids.repeat_interleave(expand, dim=0)
            if model_kwargs.get("attention_mask") is not None:
                model_kwargs["attention_mask"] = model_kwargs["attention_mask"].repeat_interleave(expand, dim=0)
        if streamer is not None:
            streamer.put(input_ids.cpu())
        self._prepare_lengths(config, input_ids.shape[1], has_default_max_length)
        model_kwargs["use_cache"] = config.use_cache
        self._prepare_static_decoding(config, model_kwargs)

        builders = _processor_builders(strategy, config)
        if builders is not None:
            processors = builders.build_logits_processor(
                self,
                config,
                input_ids_length=input_ids.shape[1],
                attention_mask=model_kwargs.get("attention_mask"),
                logits_processor=logits_processor,
            )
            criteria = builders.build_stopping_criteria(
                self, config, tokenizer=tokenizer, stopping_criteria=stopping_criteria
            )
        else:
            processors = LogitsProcessorList(logits_processor or ())
            criteria = StoppingCriteriaList(stopping_criteria or ())

        if strategy is None:
            call_kwargs: dict[str, Any] = {}
            if streamer is not None and _accepts_keyword(custom_generate, "streamer"):
                call_kwargs["streamer"] = streamer
            return custom_generate(
                self,
                input_ids,
                logits_processor=processors,
                stopping_criteria=criteria,
                generation_config=config,
                **call_kwargs,
                **model_kwargs,
            )
        # Inference mode skips autograd bookkeeping on every step; it is only safe when no tensor made
        # inside (a cache, scores) is handed back to the caller, and the sequences are copied out of it.
        inference_only = not config.return_dict_in_generate and "past_key_values" not in model_kwargs
        with torch.inference_mode() if inference_only else contextlib.nullcontext():
            output = strategy(
                self,
                input_ids,
                generation_config=config,
                logits_processor=processors,
                stopping_criteria=criteria,
                streamer=streamer,
                model_kwargs=model_kwargs,
            )
        return output.clone() if inference_only and isinstance(output, torch.Tensor) else output

    def _prepare_static_decoding(self, config: GenerationConfig, model_kwargs: dict[str, Any]) -> None:
        """``cache_implementation="static"``: a preallocated cache; ``compile_config``: the compiled decode step."""
        if config.use_cache and config.cache_implementation == "static" and model_kwargs.get("past_key_values") is None:
            make_static_cache = getattr(self, "make_static_cache", None)
            if make_static_cache is None:
                raise GenerationError(
                    f"{type(self).__name__} offers no static cache; drop cache_implementation='static'"
                )
            model_kwargs["past_key_values"] = make_static_cache(config.max_length)
        if config.compile_config:
            compile_decode_step = getattr(self, "compile_decode_step", None)
            if compile_decode_step is None:
                raise GenerationError(f"{type(self).__name__} has no compiled decode step; drop compile_config")
            compile_decode_step(**(config.compile_config if isinstance(config.compile_config, dict) else {}))

    # -- preparation steps -----------------------------------------------------------------------
    def _prepare_generation_config(
        self, generation_config: GenerationConfig | None, kwargs: dict[str, Any]
    ) -> tuple[GenerationConfig, dict[str, Any], bool]:
        """The per-call config (given or model's, overridden by kwargs, defaults filled) and the model kwargs."""
        if generation_config is None:
            config = copy.deepcopy(self.generation_config)
        elif isinstance(generation_config, GenerationConfig):
            config = generation_config.merged_with(self.generation_config)
        else:
            raise GenerationError(
                f"generation_config must be a GenerationConfig, got {type(generation_config).__name__}"
            )
        model_kwargs = config.update(**kwargs)
        for unsupported in ("inputs_embeds", "assistant_model", "prefix_allowed_tokens_fn"):
            if model_kwargs.get(unsupported) is not None:
                raise GenerationError(f"generate(): {unsupported}= is not supported; pass input_ids instead")
        has_default_max_length = config.max_length is None and config.max_new_tokens is None
        config = config.with_defaults()
        config.validate()
        return config, model_kwargs, has_default_max_length

    def _prepare_inputs(
        self, inputs: torch.Tensor | None, config: GenerationConfig, model_kwargs: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        input_ids = model_kwargs.pop("input_ids", None)
        if inputs is not None and input_ids is not None:
            raise GenerationError("generate() got both inputs and input_ids; pass one of them")
        input_ids = inputs if inputs is not None else input_ids
        device = _model_device(self)
        if input_ids is None:
            if config.bos_token_id is None:
                raise GenerationError(
                    "generate() needs input_ids, or a bos_token_id (in generation_config.json or as an argument) "
                    "to start from"
                )
            input_ids = torch.tensor([[config.bos_token_id]], dtype=torch.long, device=device)
        if not isinstance(input_ids, torch.Tensor):
            raise GenerationError(f"input_ids must be a torch tensor of token ids, got {type(input_ids).__name__}")
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise GenerationError(
                f"input_ids must be integer token ids of shape (batch, length), got {tuple(input_ids.shape)} "
                f"{input_ids.dtype}"
            )
        if input_ids.shape[1] == 0:
            raise GenerationError("input_ids is empty; pass at least one token (e.g. the bos token)")
        input_ids = input_ids.to(device)
        batch = input_ids.shape[0]
        eos = config.eos_token_ids

        pad = config.pad_token_id
        if pad is None and eos:
            pad = eos[0]
        if pad is None and batch > 1:
            raise GenerationError(
                f"generating for a batch of {batch} needs a pad token (to pad the inputs and fill rows that "
                "finish early), but neither pad_token_id nor eos_token_id is set; pass pad_token_id=... or set "
                "model.generation_config.pad_token_id"
            )
        config.pad_token_id = pad

        mask = model_kwargs.pop("attention_mask", None)
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(input_ids.shape):
                shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
                raise GenerationError(
                    f"attention_mask must be a tensor shaped like input_ids {tuple(input_ids.shape)}, got {shape}"
                )
            mask = mask.to(device)
            if batch > 1 and bool((mask[:, -1] == 0).any()):
                raise GenerationError(
                    "the attention_mask shows right padding (a row ends in padding); decoder-only models generate "
                    "after the last column, so pad on the left: tokenizer.padding_side = 'left'"
                )
        elif pad is not None and pad not in eos and bool((input_ids == pad).any()):
            mask = input_ids.ne(pad).long()
        if mask is not None and bool(mask.all()):
            mask = None
        model_kwargs["attention_mask"] = mask
        return input_ids, model_kwargs

    def _prepare_lengths(self, config: GenerationConfig, input_length: int, has_default_max_length: bool) -> None:
        """Turn ``max_new_tokens`` (or the default 20 new tokens) into an absolute ``max_length``."""
        if config.max_new_tokens is not None:
            config.max_length = input_length + config.max_new_tokens
        elif has_default_max_length:
            config.max_length = input_length + DEFAULTS["max_length"]
            limit = getattr(self.config, "max_position_embeddings", None)
            if isinstance(limit, int):
                config.max_length = min(config.max_length, limit)
        if config.max_length <= input_length:
            raise GenerationError(
                f"the input has {input_length} tokens but max_length={config.max_length} leaves no room to generate; "
                "set max_new_tokens=... (tokens to add) instead"
            )


def select_strategy(config: GenerationConfig) -> Any:
    """The strategy ``generate`` runs for ``config`` (see the module docstring for the order)."""
    if config.strategy:
        return registry.require("generation_strategies", config.strategy, what="generation strategy")
    for registration in registry.all("generation_strategies"):
        if registration.name in STANDARD_STRATEGIES:
            continue
        strategy = registration.load()
        applies = getattr(strategy, "applies", None)
        if applies is not None and applies(config):
            return strategy
    return registry.require("generation_strategies", config.get_generation_mode(), what="generation strategy")


def _processor_builders(strategy: Any, config: GenerationConfig) -> Any:
    if strategy is not None and hasattr(strategy, "build_logits_processor"):
        return strategy
    registration = registry.get("generation_strategies", config.get_generation_mode())
    if registration is None:
        return None
    standard = registration.load()
    return standard if hasattr(standard, "build_logits_processor") else None


def _model_device(model: Any) -> torch.device:
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


def _accepts_keyword(function: Any, name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())

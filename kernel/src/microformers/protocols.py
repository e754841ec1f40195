"""What the kernel calls on the objects plugins register: one ``typing.Protocol`` per contract.

:mod:`microformers.hookspecs` says how a plugin registers something; this module says what the registered
object must do once the kernel holds it. Each method's docstring is the contract: what the kernel passes,
what it expects back and when it calls. A plugin need not inherit from these classes (they are structural);
they type the kernel's code and let authors check their objects (``isinstance(obj, CheckpointFormat)``
checks the method names only). Members the kernel reads with a default when absent are listed under
"Optional" in the class docstring rather than declared, so that leaving them out stays valid.

Importing this module is cheap (no torch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import argparse

    import torch
    from torch import nn

    from .generation.configuration import GenerationConfig

__all__ = [
    "AdapterManager",
    "CarryingFormat",
    "CheckpointFormat",
    "CliCommand",
    "GenerationConfigCheck",
    "GenerationStrategy",
    "Quantizer",
    "QuantizerFactory",
    "SavingFormat",
    "ShapedFormat",
    "TokenizerBackend",
]


# -- checkpoint formats (hookspecs.register_checkpoint_formats) -----------------------------------------
@runtime_checkable
class CheckpointFormat(Protocol):
    """A weight file format: how ``weights.open_checkpoint`` finds and reads a checkpoint's tensors.

    Optional members (read with ``getattr``; default in brackets):

    - ``arguments: tuple[str, ...]`` [``()``]: the ``from_pretrained`` keywords the format reads
      (``"use_safetensors"``, ``"gguf_file"``); the kernel routes them to ``patterns``/``find``, never to a config.
    - ``selected_by: tuple[str, ...]`` [``()``]: arguments that name this format explicitly; one given
      (not None/False) makes it the only candidate.
    - ``expected: str`` [its registered name]: what its files look like, for the "no weights found" error.
    - ``patterns(**arguments) -> list[str]`` [``[]``]: file globs to fetch from a Hub repo.
    """

    def find(self, folder: Path, **arguments: Any) -> list[Path] | None:
        """The files of ``folder`` this format claims, or ``None`` (nothing of it there).

        Called for each candidate format by descending priority until one claims files. May raise
        ``weights.FormatRefused`` (its files are there but need an opt-in argument; the message is shown
        if no other format claims the folder) or a ``microformers`` error for a malformed checkpoint.
        """
        ...

    def load(self, files: list[Path], **kwargs: Any) -> Mapping[str, torch.Tensor]:
        """Tensor name -> tensor for the ``files`` that ``find`` returned, read lazily where possible.

        Called once per ``from_pretrained`` (unless a quantizer's ``prepare`` reads instead) with
        ``dtype=`` the target dtype (a hint: the kernel casts each tensor itself). The mapping may also
        offer ``file_of(name) -> Path`` for precise error messages.
        """
        ...


@runtime_checkable
class SavingFormat(CheckpointFormat, Protocol):
    """A format ``save_pretrained`` can write (``weights.save_format``).

    Optional: ``safe: bool`` [``True``]: ``save_pretrained(safe_serialization=...)`` uses the highest-priority
    saving format whose ``safe`` matches (a pickle format sets ``False``).
    """

    replaces: Sequence[str]
    """Names or globs of the files a checkpoint of this format consists of; every save leaves out the
    ``replaces`` of every format from the old folder, so no stale weights survive beside the new ones."""

    def save(
        self, state_dict: Mapping[str, torch.Tensor], folder: Path, max_shard_size: int | str, metadata: dict[str, str]
    ) -> list[str]:
        """Write ``state_dict`` (tied copies already removed) into ``folder``, the staging folder of an atomic
        save, in shards of at most ``max_shard_size``; return the names written. An exception aborts the
        save and leaves the old checkpoint untouched."""
        ...


@runtime_checkable
class ShapedFormat(CheckpointFormat, Protocol):
    """A format that can report tensor shapes without reading tensor data."""

    def shapes(self, files: list[Path]) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape, from headers only; ``from_pretrained`` uses it to refuse config sizes the
        weights cannot back before building anything."""
        ...


@runtime_checkable
class CarryingFormat(CheckpointFormat, Protocol):
    """A format whose file carries the configuration and tokenizer too (GGUF)."""

    def load_config(self, files: list[Path]) -> dict[str, Any]:
        """The ``config.json`` contents the file carries (``model_type`` included)."""
        ...

    def load_tokenizer_files(self, files: list[Path]) -> dict[str, str | dict[str, Any]]:
        """In-memory tokenizer files (``{"tokenizer.json": str, "tokenizer_config.json": dict}``), handed to a
        tokenizer backend's ``from_files``."""
        ...


# -- quantizers (hookspecs.register_quantizers) ------------------------------------------------------------
@runtime_checkable
class Quantizer(Protocol):
    """One quantized load: made by the registered class from the ``quantization_config`` dict.

    ``from_pretrained`` builds the model on meta, then calls ``prepare``, fills the model from what it
    returns, ties weights and calls ``finish``. ``to_dict()`` replaces ``config.quantization_config``.
    """

    quant_method: str
    """The ``quant_method`` it serves (the name it was registered under)."""
    description: str
    """One line for the log when ``load_in_8bit``/``load_in_4bit`` chose it."""

    def to_dict(self) -> dict[str, Any]:
        """The ``quantization_config`` to store in the model's config (saved to ``config.json``)."""
        ...

    def prepare(
        self, model: nn.Module, fmt: CheckpointFormat, files: list[Path], dtype: torch.dtype
    ) -> Mapping[str, torch.Tensor]:
        """Swap the meta-built ``model``'s modules for quantized ones and return the tensors to load into it
        (reading ``files`` through ``fmt``, converting as needed); names must match ``model.state_dict()``."""
        ...

    def finish(self, model: nn.Module) -> None:
        """Called once every tensor is in place (and tied): pack, check completeness, free load-time state."""
        ...


class QuantizerFactory(Protocol):
    """What ``register_quantizers`` registers: usually the quantizer class."""

    def __call__(self, config: Mapping[str, Any]) -> Quantizer:
        """A quantizer for this ``quantization_config`` (already a dict with ``quant_method``); raise a
        ``ConfigError`` naming the setting for values it cannot serve."""
        ...


# -- tokenizer backends (hookspecs.register_tokenizers) ------------------------------------------------------
class TokenizerBackend(Protocol):
    """A tokenizer class ``AutoTokenizer`` dispatches to.

    Optional: ``can_load(folder: Path) -> bool`` [true]: whether it can read this folder, asked in priority
    order when ``tokenizer_config.json`` names no ``tokenizer_class`` it registered for.
    """

    def from_pretrained(self, path: Path, *inputs: Any, **kwargs: Any) -> Any:
        """A tokenizer from the local folder ``path`` (the kernel resolved it; Hub arguments are removed)."""
        ...

    def from_files(self, files: dict[str, str | dict[str, Any]], *inputs: Any, **kwargs: Any) -> Any:
        """A tokenizer from in-memory files (a ``CarryingFormat.load_tokenizer_files`` result)."""
        ...


# -- generation (hookspecs.register_generation_strategies, register_generation_config_checks) ----------------
class GenerationStrategy(Protocol):
    """A decoding strategy ``generate`` runs.

    Optional: ``applies(generation_config) -> bool`` [never chosen automatically]: whether it runs for these
    settings when none is named; asked by descending priority.
    """

    def __call__(
        self,
        model: Any,
        inputs: torch.Tensor | None,
        *,
        generation_config: GenerationConfig,
        logits_processor: Any,
        stopping_criteria: Any,
        streamer: Any,
        model_kwargs: dict[str, Any],
    ) -> Any:
        """Generate: ``generation_config`` is merged and validated; ``model_kwargs`` holds the keywords that
        are not settings. Returns sequences, or an output object when ``return_dict_in_generate``."""
        ...


class GenerationConfigCheck(Protocol):
    """A check ``GenerationConfig.validate`` runs after its own (``register_generation_config_checks``)."""

    def __call__(self, config: GenerationConfig) -> None:
        """Raise ``GenerationError`` naming the setting and the valid values; return None when it is fine.
        Must not modify ``config``."""
        ...


# -- adapters (hookspecs.register_adapters) ----------------------------------------------------------------
class AdapterManager(Protocol):
    """One per model, made by the registered class as ``cls(model)``; the model's adapter methods call it.

    ``add_adapter(config, adapter_name)``, ``load_adapter(path, adapter_name, **kwargs)``, ``set_adapter(names)``,
    ``disable_adapters()``, ``enable_adapters()``, ``active_adapters() -> list[str]``, ``delete_adapter(names)``,
    ``get_adapter_state_dict(adapter_name, state_dict)``, ``merge_adapter(names)``, ``unmerge_adapter()``,
    ``merge_and_unload(**kwargs)`` and ``print_trainable_parameters()`` have the meaning of the model methods
    of the same names; ``save_pretrained`` is below.
    """

    def save_pretrained(self, save_directory: Any, **kwargs: Any) -> None:
        """Write the adapter files (not the base model) into ``save_directory``, atomically."""
        ...

    def add_adapter(self, adapter_config: Any, adapter_name: str | None = None) -> None:
        """Add a fresh trainable adapter and make it active."""
        ...

    def load_adapter(self, peft_model_id: Any, adapter_name: str | None = None, **kwargs: Any) -> Any:
        """Load an adapter folder onto the model."""
        ...


# -- CLI commands (hookspecs.register_cli_commands) ----------------------------------------------------------
class CliCommand(Protocol):
    """``command(parser)`` adds the subcommand's arguments and returns the function that runs it."""

    def __call__(self, parser: argparse.ArgumentParser) -> Any:
        """Return ``run(args: argparse.Namespace) -> int | None``."""
        ...

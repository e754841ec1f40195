"""What quantizer plugins build on: the ``Quantizer`` base class the kernel drives.

A plugin registers ``register_quantizers(register)`` -> ``register("my_method", "pkg.mod:MyQuantizer")``.
When ``from_pretrained`` sees ``quantization_config={"quant_method": "my_method", ...}`` (an argument,
or the ``quantization_config`` of ``config.json``), the kernel builds ``MyQuantizer(config_dict)`` and:

1. builds the model on the meta device (no memory);
2. calls ``source = quantizer.prepare(model, fmt, files, dtype)``: the quantizer swaps modules on
   the meta model and returns the checkpoint's tensors as the model now names them;
3. fills the model from ``source`` (shape-checked against the swapped modules' tensors);
4. calls ``quantizer.finish(model)``.

The default ``prepare`` replaces ``nn.Linear`` modules with ``self.quantized_linear(name, module)``
(``None`` keeps one) and, when a module's checkpoint holds a float ``weight`` instead of the
replacement's tensors, converts it with ``self.convert(name, weight)`` as it is read, so a quantized
load never holds the float model. Quantized modules keep their integer tensors and scales as
persistent buffers, which is what ``save_pretrained`` writes; ``config.quantization_config``
(``to_dict()``) goes to ``config.json``, so the saved folder reloads with no arguments.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from microformers.errors import CheckpointError, ConfigError
from microformers.model_helpers import copy_out_of_memory_map


class Quantizer:
    """Base class of quantizers; subclasses set ``quant_method``/``description`` and implement ``quantized_linear``."""

    quant_method: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)
        skip = self.config.get("modules_to_not_convert")
        if skip is not None and (isinstance(skip, str) or not all(isinstance(s, str) for s in skip)):
            raise ConfigError(f"quantization_config.modules_to_not_convert must be a list of names, got {skip!r}")
        self.modules_to_not_convert: list[str] = list(skip) if skip is not None else []
        self.converted: dict[str, nn.Module] = {}

    def to_dict(self) -> dict[str, Any]:
        """What ``config.json`` stores as ``quantization_config``."""
        return {"quant_method": self.quant_method, **{k: v for k, v in self.config.items() if k != "quant_method"}}

    # -- hooks the kernel calls ------------------------------------------------------------------
    def prepare(self, model: nn.Module, fmt: Any, files: list[Any], dtype: torch.dtype) -> Mapping[str, torch.Tensor]:
        """Swap modules on the meta ``model``; return the checkpoint tensors under the model's new names."""
        self.replace_modules(model)
        return ConvertingSource(fmt.load(files, dtype=dtype), self, getattr(model, "base_model_prefix", ""))

    def finish(self, model: nn.Module) -> None:
        """After loading: every tensor of a quantized module must have been read from the checkpoint,
        and the float tensors left are copied out of the checkpoint's memory map (see
        :func:`~microformers.model_helpers.copy_out_of_memory_map`)."""
        for name, module in self.converted.items():
            for attr, buf in module.named_buffers(recurse=False):
                if buf.device.type == "meta":
                    raise CheckpointError(
                        f"quantized checkpoint is missing tensor '{name}.{attr}' (quant_method "
                        f"'{self.quant_method}'); the folder is incomplete — save it again with save_pretrained"
                    )
        copy_out_of_memory_map(model)

    # -- what subclasses provide -----------------------------------------------------------------
    def quantized_linear(self, name: str, module: nn.Linear) -> nn.Module | None:
        """The replacement for linear layer ``name`` (built on the meta device), or ``None`` to keep it."""
        raise NotImplementedError

    def convert(self, name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        """Quantize the float ``weight`` of module ``name`` into its replacement's tensors (suffix -> tensor)."""
        module = self.converted[name]
        return module.quantize_weight(weight)  # type: ignore[operator]

    # -- helpers ----------------------------------------------------------------------------------
    def skipped(self, name: str) -> bool:
        """Whether ``modules_to_not_convert`` keeps module ``name`` in float (a name matches itself and children)."""
        return any(name == s or name.startswith(s + ".") or name.endswith("." + s) for s in self.modules_to_not_convert)

    def replace_modules(self, model: nn.Module) -> None:
        tied_targets = {t.rpartition(".")[0] for t in getattr(model, "tied_parameter_names", set)()}
        for name, module in list(model.named_modules()):
            if not isinstance(module, nn.Linear) or name in tied_targets or self.skipped(name):
                continue
            replacement = self.quantized_linear(name, module)
            if replacement is not None:
                self.install(model, name, replacement)

    def install(self, model: nn.Module, name: str, replacement: nn.Module) -> None:
        owner_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner_name), attr, replacement)
        self.converted[name] = replacement


class ConvertingSource(Mapping[str, torch.Tensor]):
    """A checkpoint mapping in which ``<module>.weight`` of each converted module becomes its quantized tensors.

    A checkpoint that already holds the quantized tensors (a saved quantized model) passes through.
    Each float weight is read and converted on first access to any of its outputs and dropped after
    the last one is taken.
    """

    def __init__(self, source: Mapping[str, torch.Tensor], quantizer: Quantizer, prefix: str = "") -> None:
        self.source = source
        self.quantizer = quantizer
        self._derived: dict[str, tuple[str, str, str]] = {}  # new key -> (source key, module name, suffix)
        self._pending: dict[str, dict[str, torch.Tensor]] = {}
        keys = set(source.keys())
        for key in keys:
            stem, _, leaf = key.rpartition(".")
            if leaf != "weight":
                continue
            module_name = module_for(stem, quantizer.converted, prefix)
            if module_name is None:
                continue
            suffixes = [n for n, _ in quantizer.converted[module_name].named_buffers(recurse=False)]
            if any(f"{stem}.{s}" in keys for s in suffixes):
                continue  # already quantized in the checkpoint
            for suffix in suffixes:
                self._derived[f"{stem}.{suffix}"] = (key, module_name, suffix)
        self._replaced = {v[0] for v in self._derived.values()}
        self._keys = [k for k in keys if k not in self._replaced] + list(self._derived)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._derived or (key in self.source and key not in self._replaced)

    def __getitem__(self, key: str) -> torch.Tensor:
        derived = self._derived.get(key)
        if derived is None:
            return self.source[key]
        source_key, module_name, suffix = derived
        pending = self._pending.get(source_key)
        if pending is None:
            pending = self.quantizer.convert(module_name, self.source[source_key])
            self._pending[source_key] = pending
        tensor = pending.pop(suffix)
        if not pending:
            del self._pending[source_key]
        return tensor

    def file_of(self, key: str) -> Any:
        derived = self._derived.get(key)
        file_of = getattr(self.source, "file_of", None)
        return file_of(derived[0] if derived else key) if file_of else None


def module_for(stem: str, converted: Mapping[str, Any], prefix: str) -> str | None:
    """The converted module a checkpoint stem names (with or without the model's base prefix), or None."""
    if stem in converted:
        return stem
    if prefix and f"{prefix}.{stem}" in converted:
        return f"{prefix}.{stem}"
    if prefix and stem.startswith(prefix + ".") and stem[len(prefix) + 1 :] in converted:
        return stem[len(prefix) + 1 :]
    return None

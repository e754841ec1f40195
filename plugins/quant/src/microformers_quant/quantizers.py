"""The ``int8`` and ``int4`` quantizers (and the shared machinery the ``gguf`` one builds on)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from microformers.errors import CheckpointError, ConfigError
from microformers_sdk.quantization import ConvertingSource, Quantizer

from . import kernels
from .modules import ACTIVATION_BITS, QuantEmbedding, QuantLinear, TiedQuantHead


class PluginQuantizer(Quantizer):
    """Linears and the (tied) embedding/LM head become ``QuantLinear``/``QuantEmbedding``/``TiedQuantHead``.

    The layout of each layer (bits, group) comes from the checkpoint when it already holds quantized
    tensors (a folder saved from a quantized model), else from ``layout_for``.
    """

    allowed_keys: frozenset[str] = frozenset({"quant_method", "modules_to_not_convert", "activations"})
    default_activations = "float32"

    def __init__(self, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - self.allowed_keys)
        if unknown:
            raise ConfigError(
                f"quantization_config for quant_method '{self.quant_method}' has unknown field(s) {unknown}; "
                f"accepted: {sorted(self.allowed_keys)}"
            )
        super().__init__(config)
        self.activations = self.config.get("activations", self.default_activations)
        if self.activations not in ACTIVATION_BITS:
            raise ConfigError(
                f"quantization_config.activations must be one of {sorted(ACTIVATION_BITS)} (integer activations "
                f"are quantized per 32 values when decoding), got {self.activations!r}"
            )
        self.source: Mapping[str, Any] = {}
        self.prefix = ""
        self.head_name: str | None = None

    # -- layouts ---------------------------------------------------------------------------------
    def layout_for(self, name: str, module: nn.Module, is_head: bool) -> tuple[int, int | None] | None:
        """(bits, group; None = one group per row) for a float checkpoint's layer, or None to keep it float."""
        raise NotImplementedError

    def saved_layout(self, name: str, rows: int, cols: int) -> tuple[int, int] | None:
        """(bits, group) of a layer the checkpoint already stores quantized, checked against its shape."""
        qkey, skey = self.key_for(name, "qweight"), self.key_for(name, "scales")
        if qkey is None:
            return None
        if skey is None:
            raise CheckpointError(f"quantized checkpoint has '{qkey}' but no '{name}.scales'; the folder is incomplete")
        qshape, sshape = _shape(self.source, qkey), _shape(self.source, skey)
        if len(qshape) != 2 or qshape[0] != rows or qshape[1] not in (cols, cols // 2):
            raise CheckpointError(
                f"tensor '{qkey}' has shape {tuple(qshape)}; layer '{name}' ({rows} x {cols}) needs "
                f"({rows}, {cols}) for 8 bits or ({rows}, {cols // 2}) for 4 bits"
            )
        if len(sshape) != 2 or sshape[0] != rows or sshape[1] == 0 or cols % sshape[1]:
            raise CheckpointError(
                f"tensor '{skey}' has shape {tuple(sshape)}; layer '{name}' needs ({rows}, in_features / group) "
                f"with a group size dividing {cols}"
            )
        bits = 4 if qshape[1] * 2 == cols and qshape[1] != cols else 8
        if bits == 4:
            mkey = self.key_for(name, "mins")
            if mkey is None:
                raise CheckpointError(f"quantized checkpoint has 4-bit '{qkey}' but no '{name}.mins'; it is incomplete")
            if _shape(self.source, mkey) != sshape:
                raise CheckpointError(
                    f"tensor '{skey}' has shape {tuple(sshape)} but '{mkey}' has {tuple(_shape(self.source, mkey))}; "
                    "they must match (one scale and one minimum per group)"
                )
        return bits, cols // sshape[1]

    def key_for(self, name: str, suffix: str) -> str | None:
        prefix = self.prefix
        candidates = [name]
        if prefix and name.startswith(prefix + "."):
            candidates.append(name[len(prefix) + 1 :])
        elif prefix:
            candidates.append(f"{prefix}.{name}")
        for stem in candidates:
            if f"{stem}.{suffix}" in self.source:
                return f"{stem}.{suffix}"
        return None

    # -- the kernel's hooks --------------------------------------------------------------------------
    def open_source(self, fmt: Any, files: list[Any], dtype: torch.dtype) -> Mapping[str, Any]:
        return fmt.load(files, dtype=dtype)

    def prepare(self, model: nn.Module, fmt: Any, files: list[Any], dtype: torch.dtype) -> Mapping[str, torch.Tensor]:
        self.source = self.open_source(fmt, files, dtype)
        self.prefix = getattr(model, "base_model_prefix", "")
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self.head_name = next((n for n, m in model.named_modules() if m is head), None) if head is not None else None
        self.replace_modules(model)
        self.replace_embedding(model, dtype)
        self.match_source_to_modules()
        return ConvertingSource(self.source, self, self.prefix)

    def match_source_to_modules(self) -> None:
        """After the modules are swapped: let the source adjust tensors kept for modules that stayed float."""

    def finish(self, model: nn.Module) -> None:
        super().finish(model)
        for module in self.converted.values():
            module.activation_bits = ACTIVATION_BITS[self.activations]
            module.interleave()  # int8 activations: the 8-row layout their kernels read fastest
        self.source = {}  # drop the checkpoint now that the model holds the tensors (super() copied the rest out)
        kernels.native_available()  # build/load now, not inside the first forward (or a compiled graph)

    def quantized_linear(self, name: str, module: nn.Linear) -> nn.Module | None:
        layout = self.saved_layout(name, module.out_features, module.in_features)
        if layout is None:
            layout = self.layout_for(name, module, name == self.head_name)
            if layout is None:
                return None
        return QuantLinear.like(module, layout[0], layout[1], name)

    def replace_embedding(self, model: nn.Module, dtype: torch.dtype) -> None:
        tied = bool(model.tied_parameter_names()) if hasattr(model, "tied_parameter_names") else False
        embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        if not isinstance(embedding, nn.Embedding) or not tied or self.head_name is None:
            return  # untied heads are linears like any other; untied embeddings stay float
        name = next(n for n, m in model.named_modules() if m is embedding)
        head = model.get_submodule(self.head_name)
        if self.skipped(name) or self.skipped(self.head_name) or not isinstance(head, nn.Linear):
            return
        layout = self.saved_layout(name, embedding.num_embeddings, embedding.embedding_dim)
        if layout is None:
            layout = self.layout_for(name, embedding, True)
            if layout is None:
                return
        quantized = QuantEmbedding.like(embedding, layout[0], layout[1], name)
        quantized.output_dtype = dtype
        # other paths to the same table (an encoder-decoder's stacks share one embedding) follow it
        aliases = [n for n, m in model.named_modules(remove_duplicate=False) if m is embedding and n != name]
        self.install(model, name, quantized)
        for alias in aliases:
            owner, _, attr = alias.rpartition(".")
            setattr(model.get_submodule(owner), attr, quantized)
        owner, _, attr = self.head_name.rpartition(".")
        setattr(model.get_submodule(owner), attr, TiedQuantHead(quantized, head.bias))


class Int8Quantizer(PluginQuantizer):
    quant_method = "int8"
    description = "int8 weights, symmetric per output channel, float32 activations, microformers-quant CPU kernel"

    def layout_for(self, name: str, module: nn.Module, is_head: bool) -> tuple[int, int | None]:
        return 8, None


class Int4Quantizer(PluginQuantizer):
    quant_method = "int4"
    allowed_keys = frozenset({"quant_method", "modules_to_not_convert", "activations", "group_size"})

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        group = self.config.setdefault("group_size", 32)
        if not isinstance(group, int) or isinstance(group, bool) or group <= 0 or group % 32:
            raise ConfigError(
                f"quantization_config.group_size must be a positive multiple of 32 (32, 64, 128), got {group!r}"
            )
        self.group_size = group

    @property
    def description(self) -> str:  # type: ignore[override]
        return (
            f"int4 weights, asymmetric, group {self.group_size}, float32 activations; embedding/LM head int8 "
            "per channel; microformers-quant CPU kernel"
        )

    def layout_for(self, name: str, module: nn.Module, is_head: bool) -> tuple[int, int | None]:
        if is_head:
            return 8, None
        cols = module.in_features if isinstance(module, nn.Linear) else module.embedding_dim
        if cols % self.group_size:
            raise ConfigError(
                f"int4 group_size {self.group_size} does not divide the input size {cols} of layer '{name}'; "
                "pick a group_size that divides it (32, 64, 128) or list the layer in modules_to_not_convert"
            )
        return 4, self.group_size


def _shape(source: Mapping[str, Any], key: str) -> tuple[int, ...]:
    shape_of = getattr(source, "shape_of", None)
    return tuple(shape_of(key)) if shape_of is not None else tuple(source[key].shape)

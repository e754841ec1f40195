"""What ``PreTrainedModel`` does to a model's modules: initialise, place, resize embeddings, require input grads.

``PreTrainedModel.resize_token_embeddings``, ``enable_input_require_grads``/``disable_input_require_grads``, the
default ``_init_weights`` and the ``device_map`` placement of ``from_pretrained`` call these functions; they
take the model as their first argument so that tests (and plugins) can call them on any ``nn.Module`` with
the same accessors. ``copy_out_of_memory_map`` is for loaders that replaced modules (quantizers, packing).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .devices import device_map_entries
from .errors import ConfigError

__all__ = [
    "copy_out_of_memory_map",
    "disable_input_require_grads",
    "enable_input_require_grads",
    "init_weights",
    "place_modules",
    "resize_token_embeddings",
]


def _new_rows(old: torch.Tensor, count: int, mean_resizing: bool, std: float) -> torch.Tensor:
    """``count`` fresh rows: drawn around the old rows' mean and covariance, or from N(0, std)."""
    if not mean_resizing:
        return torch.empty(count, old.shape[1], dtype=old.dtype, device=old.device).normal_(0.0, std)
    rows = old.detach().to(torch.float32)
    mean = rows.mean(dim=0)
    centred = rows - mean
    covariance = centred.T @ centred / rows.shape[0]
    scaled = 1e-9 * covariance
    try:
        sampler = torch.distributions.MultivariateNormal(mean, covariance_matrix=scaled)
        fresh = sampler.sample((count,))
    except (ValueError, RuntimeError):  # covariance not positive definite (fewer rows than columns)
        fresh = mean.expand(count, -1).clone()
    return fresh.to(old.dtype)


def _resized(module: nn.Module, rows: int, mean_resizing: bool, std: float) -> nn.Module:
    """A copy of an ``nn.Embedding`` or ``nn.Linear`` (rows = output features) with ``rows`` rows."""
    weight = module.weight
    old_rows = weight.shape[0]
    kept = min(old_rows, rows)
    data = torch.empty(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        data[:kept] = weight[:kept]
        if rows > old_rows:
            data[old_rows:] = _new_rows(weight, rows - old_rows, mean_resizing, std)
    if isinstance(module, nn.Embedding):
        padding_idx = module.padding_idx if module.padding_idx is not None and module.padding_idx < rows else None
        fresh: nn.Module = nn.Embedding(rows, weight.shape[1], padding_idx=padding_idx, device="meta")
    elif isinstance(module, nn.Linear):
        fresh = nn.Linear(weight.shape[1], rows, bias=module.bias is not None, device="meta")
        if module.bias is not None:
            bias = torch.zeros(rows, dtype=module.bias.dtype, device=module.bias.device)
            with torch.no_grad():
                bias[:kept] = module.bias[:kept]
            fresh.bias = nn.Parameter(bias, requires_grad=module.bias.requires_grad)
    else:
        raise ConfigError(
            f"resize_token_embeddings: cannot resize a {type(module).__name__}; only nn.Embedding and nn.Linear "
            "embeddings can be resized"
        )
    fresh.weight = nn.Parameter(data, requires_grad=weight.requires_grad)
    return fresh


def resize_token_embeddings(
    model: Any, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
) -> nn.Module:
    """Give the input embeddings (and an untied output head, and its bias) ``new_num_tokens`` rows.

    ``pad_to_multiple_of`` rounds the size up. Kept rows are copied; new rows are drawn from a normal
    distribution with the old rows' mean and (scaled) covariance (``mean_resizing=True``), else from
    N(0, ``config.initializer_range``). ``config.vocab_size`` follows and tied heads are tied again.
    """
    embeddings = model.get_input_embeddings()
    if new_num_tokens is None and pad_to_multiple_of is None:
        return embeddings
    rows = embeddings.weight.shape[0] if new_num_tokens is None else new_num_tokens
    if not isinstance(rows, int) or isinstance(rows, bool) or rows <= 0:
        raise ConfigError(f"resize_token_embeddings: new_num_tokens={new_num_tokens!r} must be a positive integer")
    if pad_to_multiple_of is not None:
        if not isinstance(pad_to_multiple_of, int) or isinstance(pad_to_multiple_of, bool) or pad_to_multiple_of <= 0:
            raise ConfigError(
                f"resize_token_embeddings: pad_to_multiple_of={pad_to_multiple_of!r} must be a positive integer"
            )
        rows = math.ceil(rows / pad_to_multiple_of) * pad_to_multiple_of
    std = float(getattr(model.config, "initializer_range", 0.02))
    fresh = _resized(embeddings, rows, mean_resizing, std)
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embeddings.weight
    if head is not None and not hasattr(model, "set_output_embeddings"):
        raise ConfigError(
            f"resize_token_embeddings: {type(model).__name__} has an output head but no set_output_embeddings()"
        )
    model.set_input_embeddings(fresh)
    if head is not None and (not tied or getattr(head, "bias", None) is not None):
        model.set_output_embeddings(_resized(head, rows, mean_resizing, std))
    if tied:
        model.get_output_embeddings().weight = fresh.weight
    if getattr(model.config, "tie_word_embeddings", False):  # a tie source resized with its target (BERT's bias)
        for target, source in model._tied_weights_keys.items():
            owner, _, attr = source.rpartition(".")
            try:
                resized, current = model.get_parameter(target), model.get_parameter(source)
            except AttributeError:
                continue
            if current.shape != resized.shape:
                setattr(model.get_submodule(owner), attr, resized)
    text_config = getattr(model.config, "text_config", None) or model.config
    text_config.vocab_size = rows
    model.config.vocab_size = rows
    model.tie_weights()
    return fresh


def _require_grad(module: nn.Module, inputs: Any, output: Any) -> None:
    output.requires_grad_(True)


def enable_input_require_grads(model: Any) -> None:
    """Make the input embeddings' output require grad (training adapters on a frozen model with checkpointing)."""
    disable_input_require_grads(model)
    embeddings = model.get_input_embeddings()
    model.__dict__["_require_grads_hook"] = embeddings.register_forward_hook(_require_grad)


def disable_input_require_grads(model: Any) -> None:
    hook = model.__dict__.pop("_require_grads_hook", None)
    if hook is not None:
        hook.remove()


def place_modules(model: Any, device_map: Any) -> None:
    """Move modules as ``device_map`` says and record it as ``model.hf_device_map``.

    ``"auto"``/``"balanced"``/``"sequential"`` put the whole model on the first accelerator, else the CPU;
    a device (``"cpu"``, ``"cuda:0"``, ``0``) takes the whole model; a dict maps module prefixes (``""``
    for the whole model) to devices and must cover every parameter.
    """
    device_map = device_map_entries(device_map)
    placed = {}
    for prefix, device in sorted(device_map.items(), key=lambda item: len(item[0])):
        try:
            module = model.get_submodule(prefix)
            module.to(torch.device(f"cuda:{device}" if isinstance(device, int) else device))
        except (AttributeError, RuntimeError, AssertionError) as exc:
            raise ConfigError(f"device_map entry {prefix!r}: {device!r}: {exc}") from exc
        placed[prefix] = device
    names = [n for n, _ in model.named_parameters()]
    uncovered = [n for n in names if not any(p == "" or n == p or n.startswith(p + ".") for p in placed)]
    if uncovered:
        raise ConfigError(
            f"device_map gives no device for {', '.join(uncovered[:5])}; add their module prefixes (or '') to it"
        )
    model.hf_device_map = placed


def init_weights(model: Any, module: nn.Module) -> None:
    """``PreTrainedModel._init_weights``: normal(0, ``config.initializer_range``) linear and embedding weights (the
    padding row zeroed), zero biases, unit LayerNorm/RMSNorm weights, as the reference initialises them."""
    std = getattr(model.config, "initializer_range", 0.02)
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        if module.weight is not None:
            nn.init.ones_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif "RMSNorm" in type(module).__name__ and isinstance(getattr(module, "weight", None), nn.Parameter):
        nn.init.ones_(module.weight)


def copy_out_of_memory_map(model: nn.Module) -> None:
    """Give every float CPU tensor of ``model`` its own memory.

    After a load that replaced modules (a quantizer, packed weights), the float tensors left (norms,
    biases, embeddings) may be views of the checkpoint's memory map, and every page of the map the
    load touched stays resident while any view lives; copied out, the map can close.
    """
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point() and tensor.device.type == "cpu":
                tensor.data = tensor.data.clone()

"""FSDP2 for the Trainer: torch's own ``fully_shard`` on each repeated layer, then on the model.

Layers are chosen by class name: ``fsdp_config["transformer_layer_cls_to_wrap"]``, else the model's
``_no_split_modules``. Saving gathers the full state dict (every process takes part; rank 0 writes), or, with
``fsdp_config["state_dict_type"] == "SHARDED_STATE_DICT"``, every process writes its own shards through
``torch.distributed.checkpoint`` into the checkpoint folder rank 0 stages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from microformers import CheckpointError, ConfigError

from . import checkpointing as ckpt


def _api() -> Any:
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard
    except ImportError as exc:  # pragma: no cover - torch builds without torch.distributed
        raise ConfigError(f"TrainingArguments(fsdp=...): this torch build has no FSDP2 ({exc})") from exc
    return FSDPModule, fully_shard


def is_sharded(model: nn.Module) -> bool:
    module_cls, _ = _api()
    return isinstance(model, module_cls)


def class_name(module: nn.Module) -> str:
    """The module's own class name (``fully_shard`` turns ``LlamaDecoderLayer`` into ``FSDPLlamaDecoderLayer``)."""
    module_cls, _ = _api()
    kind = type(module)
    if isinstance(module, module_cls):
        kind = next(c for c in kind.__mro__[1:] if not issubclass(c, module_cls))
    return kind.__name__


def layer_class_names(model: nn.Module, fsdp_config: dict[str, Any]) -> list[str]:
    """The layer classes to shard one by one: the setting, else what the model declares."""
    names = fsdp_config.get("transformer_layer_cls_to_wrap") or list(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ConfigError(
            f"TrainingArguments(fsdp=...): {type(model).__name__} declares no layer classes (_no_split_modules) to "
            "shard one by one; name them with fsdp_config={'transformer_layer_cls_to_wrap': ['MyDecoderLayer']}"
        )
    present = {class_name(m) for m in model.modules()}
    missing = [name for name in names if name not in present]
    if missing:
        raise ConfigError(
            f"TrainingArguments(fsdp=...): {type(model).__name__} has no module of class {missing} (from "
            "fsdp_config['transformer_layer_cls_to_wrap'] or the model's _no_split_modules); its classes include "
            f"{sorted(present)[:20]}"
        )
    return names


def shard_model(model: nn.Module, fsdp_config: dict[str, Any], device: torch.device, world_size: int) -> nn.Module:
    """``fully_shard`` each layer (innermost first), then the model; the parameters become DTensors in place."""
    _, fully_shard = _api()
    from torch.distributed.device_mesh import init_device_mesh

    names = set(layer_class_names(model, fsdp_config))
    mesh = init_device_mesh(device.type, (world_size,))
    reshard = fsdp_config["reshard_after_forward"]
    layers = [m for m in model.modules() if class_name(m) in names and m is not model]
    for layer in reversed(layers):  # post-order: a nested layer is sharded before the one holding it
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's tensors on CPU (a collective: every process calls it; only rank 0 gets them)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state, gathered and keyed by parameter name (a collective, rank 0 gets it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Each process keeps its shard of a full (name-keyed) optimizer state dict."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


@contextlib.contextmanager
def unwrapped_class(model: nn.Module) -> Iterator[None]:
    """The model's own class for the duration (``fully_shard`` swaps it for ``FSDP<Class>``), so what a save
    writes (``architectures`` in config.json) names the model, not the wrapper."""
    module_cls, _ = _api()
    wrapped = type(model)
    if not isinstance(model, module_cls):
        yield
        return
    model.__class__ = next(c for c in wrapped.__mro__[1:] if not issubclass(c, module_cls))
    try:
        yield
    finally:
        model.__class__ = wrapped


def shared_folder(folder: Path | None) -> Path:
    """Rank 0's staging folder, on every process (a collective). Rank 0 passes None when it could not create
    one: every process then raises, instead of the others waiting for shards that will never be asked for."""
    box = [None if folder is None else str(folder)]
    torch.distributed.broadcast_object_list(box, src=0)
    if box[0] is None:
        raise CheckpointError(
            "saving a sharded checkpoint: process 0 could not create the checkpoint folder (its own error says why)"
        )
    return Path(box[0])


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, folder: Path) -> None:
    """Each process writes its shards of the model (and of the optimizer state) under ``folder`` with
    ``torch.distributed.checkpoint`` (a collective; ``folder`` must be on a file system every process sees)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    parts = [("model", ckpt.SHARDED_MODEL_DIR)]
    if optimizer is not None:
        parts.append(("optimizer", ckpt.SHARDED_OPTIMIZER_DIR))
    for key, name in parts:
        if key == "model":
            state = {key: get_model_state_dict(model)}
        else:
            state = {key: get_optimizer_state_dict(model, optimizer)}
        try:
            dcp.save(state, checkpoint_id=folder / name)
        except CheckpointException as exc:  # every process raises it, with each failed process's error
            raise CheckpointError(
                f"saving the sharded checkpoint's {name}/ failed in process {_failures(exc)}; the checkpoint "
                "folder was not replaced (the previous checkpoints are intact)"
            ) from exc


def _failures(exc: Any) -> str:
    """``rank N (OSError: ...)`` for each process a ``CheckpointException`` reports."""
    failures = getattr(exc, "failures", None) or {}
    parts = []
    for rank, pair in sorted(failures.items()):
        error = pair[0] if isinstance(pair, tuple) else pair
        parts.append(f"{rank} ({type(error).__name__}: {str(error)[:300]})")
    return ", ".join(parts) or str(exc)[:500]


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, folder: Path) -> None:
    """Each process reads the part of a sharded checkpoint its shards hold (any number of processes may have
    written it: the checkpoint is resharded as it loads)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    parts: list[tuple[str, Path]] = [("model", folder / ckpt.SHARDED_MODEL_DIR)]
    if optimizer is not None:
        parts.append(("optimizer", folder / ckpt.SHARDED_OPTIMIZER_DIR))
    for key, path in parts:
        try:
            if key == "model":
                state = {key: get_model_state_dict(model)}
                dcp.load(state, checkpoint_id=path)
                set_model_state_dict(model, state[key])
            else:
                state = {key: get_optimizer_state_dict(model, optimizer)}
                dcp.load(state, checkpoint_id=path)
                set_optimizer_state_dict(model, optimizer, state[key])
        except (Exception, CheckpointException) as exc:  # another model's or optimizer's folder, a damaged file
            why = (
                f"process {_failures(exc)}" if isinstance(exc, CheckpointException) else f"{type(exc).__name__}: {exc}"
            )
            raise CheckpointError(
                f"{path} could not be loaded into the {'model' if key == 'model' else type(optimizer).__name__} "
                f"({why[:800]}); the checkpoint is damaged or belongs to another model or optimizer — "
                "resume from an earlier checkpoint-<step> folder"
            ) from exc

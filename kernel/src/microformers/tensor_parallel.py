"""Tensor parallelism for ``from_pretrained(..., tp_plan="auto")``: torch's own engine, driven by plans as data.

A model family declares how its layers split as ``base_model_tp_plan`` on its config class (module name
patterns relative to the base model, ``*`` standing for one name part such as a layer index, mapped to a
style: ``"colwise"`` or ``"rowwise"``), as the reference implementation does. Loading under ``torchrun``:

1. the process group is started from torchrun's environment (unless the script started it) and a 1-D
   ``DeviceMesh`` of ``tp_size`` ranks is made (or the caller's ``device_mesh`` is used);
2. the model, still on the meta device, is handed to ``torch.distributed.tensor.parallel.parallelize_module``
   with ``ColwiseParallel`` / ``RowwiseParallel`` for the matched modules, so their parameters become
   ``DTensor`` s and their forward hooks do the collectives;
3. while the weights are read, each rank takes only its slice of a sharded tensor: from a memory-mapped
   safetensors file it reads just those bytes; other formats read the tensor, then keep the slice.

Attention code that views projections as ``(batch, seq, -1, head_dim)`` then sees ``heads / tp`` local heads,
and the KV cache holds local heads only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import torch
from torch import nn

from .errors import ConfigError

#: Styles a plan may name, as the reference spells them.
STYLES = ("colwise", "rowwise", "colwise_rep")

# Head counts the attention splits by; a plan that shards a model must divide each one the config declares.
_HEAD_FIELDS = ("num_attention_heads", "num_key_value_heads")


def _style(name: str, pattern: str) -> Any:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if name == "colwise":
        return ColwiseParallel()
    if name == "rowwise":
        return RowwiseParallel()
    if name == "colwise_rep":  # a column split whose output is gathered whole again (an output head)
        return ColwiseParallel(output_layouts=Replicate())
    raise ConfigError(
        f"tp_plan: module pattern {pattern!r} has the unknown style {name!r}; use one of {', '.join(STYLES)}"
    )


@attrs.frozen
class TensorParallel:
    """A validated tensor-parallel request: the plan (``"auto"`` or an explicit one) and the 1-D mesh it runs on."""

    plan: Any
    mesh: Any
    device: torch.device

    @property
    def size(self) -> int:
        return int(self.mesh.size())

    def module_plan(self, model: nn.Module) -> dict[str, str]:
        """Full module name -> style for every module of ``model`` the plan matches."""
        if self.plan == "auto":
            declared = getattr(model.config, "base_model_tp_plan", None)
            if not declared:
                raise ConfigError(
                    f"tp_plan='auto': {type(model.config).__name__} (model_type {model.config.model_type!r}) declares no "
                    "base_model_tp_plan, so microformers does not know how to split this architecture; pass an "
                    "explicit tp_plan={'<module pattern>': 'colwise' | 'rowwise', ...} or load without tp_plan"
                )
            prefix = getattr(model, "base_model_prefix", "")
            base = prefix + "." if prefix and isinstance(getattr(model, prefix, None), nn.Module) else ""
            patterns = {base + pattern: style for pattern, style in declared.items()}
        else:
            patterns = dict(self.plan)
        compiled = [(re.compile(re.escape(p).replace(r"\*", r"[^.]+") + r"\Z"), p, s) for p, s in patterns.items()]
        matched: dict[str, str] = {}
        for name, _module in model.named_modules():
            for regex, pattern, style in compiled:
                if regex.match(name):
                    _style(style, pattern)  # an unknown style is refused before anything is sharded
                    matched[name] = style
                    break
        if not matched:
            raise ConfigError(
                f"tp_plan: no module of {type(model).__name__} matches the plan's patterns "
                f"({', '.join(sorted(patterns))}); check the module names (model.named_modules())"
            )
        return matched

    def check_divisible(self, model: nn.Module, plan: dict[str, str]) -> None:
        """Refuse a split that would cut an attention head or leave ranks with unequal slices."""
        config = model.config
        for field in _HEAD_FIELDS:
            value = getattr(config, field, None)
            if isinstance(value, int) and value % self.size:
                raise ConfigError(
                    f"tp_plan: {field}={value} in the config is not divisible by tp_size={self.size}, so the heads "
                    f"cannot be split evenly across the ranks; use a tp_size that divides {value}"
                )
        for name, style in plan.items():
            module = model.get_submodule(name)
            if not isinstance(module, (nn.Linear, nn.Embedding)):
                raise ConfigError(
                    f"tp_plan: {name!r} is a {type(module).__name__}; styles {', '.join(STYLES)} split nn.Linear "
                    "(and nn.Embedding) layers only"
                )
            weight = module.weight
            dim = 0 if style.startswith("colwise") else 1
            if isinstance(module, nn.Embedding):
                dim = 1 - dim
            if weight.shape[dim] % self.size:
                raise ConfigError(
                    f"tp_plan: {name} ({style}) splits a dimension of {weight.shape[dim]}, which tp_size={self.size} "
                    "does not divide; use a tp_size that divides it"
                )

    def shard(self, model: nn.Module, source: Mapping[str, Any]) -> Mapping[str, Any]:
        """Parallelise the meta-built ``model`` in place; return ``source`` reading each rank's slices."""
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.parallel import parallelize_module

        plan = self.module_plan(model)
        self.check_divisible(model, plan)
        parallelize_module(model, self.mesh, {name: _style(style, name) for name, style in plan.items()})
        placements = {
            name: tensor.placements
            for name, tensor in model.state_dict(keep_vars=True).items()
            if isinstance(tensor, DTensor)
        }
        by_key: dict[str, Any] = {}
        prefix = getattr(model, "base_model_prefix", "")
        for name, value in placements.items():
            by_key[name] = value
            if prefix and name.startswith(prefix + "."):  # checkpoints of the bare base model lack the prefix
                by_key.setdefault(name[len(prefix) + 1 :], value)
            elif prefix:
                by_key.setdefault(f"{prefix}.{name}", value)
        for owner in model.modules():  # buffers made while building (rotary tables) go to the mesh's device too
            for key, buffer in owner._buffers.items():
                if buffer is not None and not buffer.is_meta and buffer.device != self.device:
                    owner._buffers[key] = buffer.to(self.device)
        model._tp_plan = plan
        model._tp_size = self.size
        model._device_mesh = self.mesh
        return ShardedSource(source, by_key, self.mesh, self.device)

    def placement(self, _name: str) -> torch.device:
        return self.device


class ShardedSource(Mapping[str, Any]):
    """A checkpoint's tensors as this rank holds them: a ``DTensor`` of its slice for a sharded parameter
    (the global shape kept, so shape checks compare with the checkpoint), the whole tensor otherwise."""

    def __init__(self, source: Mapping[str, Any], placements: dict[str, Any], mesh: Any, device: torch.device) -> None:
        self._source = source
        self._placements = placements
        self._mesh = mesh
        self._device = device
        self.file_of = getattr(source, "file_of", None) or (lambda _key: "the checkpoint")

    def __getitem__(self, key: str) -> Any:
        from torch.distributed.tensor import DTensor, Shard

        placements = self._placements.get(key)
        if placements is None:
            return self._source[key]
        shape = self._shape(key)
        (placement,) = placements
        if isinstance(placement, Shard):
            dim = placement.dim % len(shape)
            size = shape[dim] // self._mesh.size()
            if size * self._mesh.size() != shape[dim]:  # not this model's shape: the loader reports the mismatch
                return self._source[key]
            start = self._mesh.get_local_rank() * size
            local = self._slice(key, dim, start, start + size)
        else:
            local = self._source[key]
        local = local.to(self._device) if local.device != self._device else local
        stride = torch.empty(shape, device="meta").stride()
        return DTensor.from_local(
            local, self._mesh, placements, run_check=False, shape=torch.Size(shape), stride=stride
        )

    def _shape(self, key: str) -> tuple[int, ...]:
        shape_of = getattr(self._source, "shape_of", None)
        return tuple(shape_of(key)) if shape_of is not None else tuple(self._source[key].shape)

    def _slice(self, key: str, dim: int, start: int, stop: int) -> torch.Tensor:
        index = (slice(None),) * dim + (slice(start, stop),)
        get_slice = getattr(self._source, "get_slice", None)
        if get_slice is not None:  # a memory-mapped file: only this rank's bytes are read
            return get_slice(key)[index]
        return self._source[key][index].contiguous()  # read whole, keep the slice (the rest is freed)

    def __iter__(self) -> Iterator[str]:
        return iter(self._source)

    def __len__(self) -> int:
        return len(self._source)


def gathered_state(
    model: nn.Module, state_dict: Mapping[str, Any] | None, is_main_process: bool
) -> tuple[dict[str, Any], bool]:
    """``save_pretrained`` of a tensor-parallel model: the whole tensors (every rank must take part in the
    gather, so call it on all of them) and whether this rank writes (global rank 0 only, as all hold the same)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    state = model.state_dict() if state_dict is None else state_dict
    full = {key: value.full_tensor() if isinstance(value, DTensor) else value for key, value in state.items()}
    return full, is_main_process and dist.get_rank() == 0


def tensor_parallel_request(
    tp_plan: Any, tp_size: Any, device_mesh: Any, device: Any, device_map: Any
) -> TensorParallel | None:
    """Check ``from_pretrained``'s tensor-parallel arguments, starting the process group from torchrun's
    environment when needed; None when ``tp_plan`` is not given (then ``tp_size``/``device_mesh`` are refused)."""
    if tp_plan is None:
        given = [name for name, value in (("tp_size", tp_size), ("device_mesh", device_mesh)) if value is not None]
        if given:
            raise ConfigError(
                f"from_pretrained({', '.join(given)}=...) needs tp_plan='auto' (tensor parallelism); pass it too, "
                "or drop the argument"
            )
        return None
    if isinstance(tp_plan, str):
        if tp_plan != "auto":
            raise ConfigError(
                f"tp_plan={tp_plan!r}: use tp_plan='auto' (the plan the model's config declares) or a dict of "
                "module pattern -> style"
            )
    elif not isinstance(tp_plan, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tp_plan.items()
    ):
        raise ConfigError(f"tp_plan must be 'auto' or a dict of module pattern -> style, got {type(tp_plan).__name__}")
    for name, value in (("device_map", device_map), ("device", device)):
        if value is not None:
            raise ConfigError(
                f"from_pretrained(tp_plan=..., {name}=...): with tensor parallelism each rank's device follows the "
                "mesh (cuda:LOCAL_RANK on GPUs, else the CPU); drop " + name
            )
    if tp_size is not None and (isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1):
        raise ConfigError(f"tp_size must be a positive int, got {tp_size!r}")
    import torch.distributed as dist

    if device_mesh is not None:
        mesh = _user_mesh(device_mesh, tp_size)
    else:
        _init_process_group()
        world = dist.get_world_size()
        tp_size = world if tp_size is None else tp_size
        if world % tp_size:
            raise ConfigError(
                f"tp_size={tp_size} does not divide the world size {world} (processes started by torchrun); "
                "use a tp_size that divides it"
            )
        from torch.distributed.device_mesh import init_device_mesh

        kind = "cuda" if torch.cuda.is_available() else "cpu"
        if tp_size == world:
            mesh = init_device_mesh(kind, (world,), mesh_dim_names=("tp",))
        else:
            mesh = init_device_mesh(kind, (world // tp_size, tp_size), mesh_dim_names=("dp", "tp"))["tp"]
    if mesh.device_type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        target = torch.device("cuda", local)
    else:
        target = torch.device(mesh.device_type)
    return TensorParallel(plan=tp_plan, mesh=mesh, device=target)


def _user_mesh(device_mesh: Any, tp_size: int | None) -> Any:
    from torch.distributed.device_mesh import DeviceMesh

    if not isinstance(device_mesh, DeviceMesh):
        raise ConfigError(f"device_mesh must be a torch.distributed DeviceMesh, got {type(device_mesh).__name__}")
    if device_mesh.ndim != 1:
        names = device_mesh.mesh_dim_names or ()
        if "tp" not in names:
            raise ConfigError(
                f"device_mesh has {device_mesh.ndim} dimensions and none named 'tp'; pass a 1-D mesh "
                "(or name its tensor-parallel dimension 'tp')"
            )
        device_mesh = device_mesh["tp"]
    if tp_size is not None and tp_size != device_mesh.size():
        raise ConfigError(
            f"tp_size={tp_size} differs from the device_mesh's size {device_mesh.size()}; pass one of them"
        )
    return device_mesh


def _init_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if not dist.is_available() or missing:
        raise ConfigError(
            "tp_plan: tensor parallelism splits the model across the processes of a distributed run, and this "
            f"process is not one ({', '.join(missing) or 'torch.distributed'} not set). Launch the script with "
            "torchrun --nproc-per-node N script.py (or call torch.distributed.init_process_group first), or "
            "load without tp_plan"
        )
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")

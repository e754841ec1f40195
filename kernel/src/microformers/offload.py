"""Big-model loading: placing a model's modules on GPUs, the CPU and disk under ``max_memory``, and running the
modules placed on disk with their weights read just in time.

``from_pretrained(device_map="auto", max_memory={0: "2GiB", "cpu": "300MiB"}, offload_folder=...)``:

* :func:`offload_request` reads and checks the loading arguments (sizes, device keys, the folder) before
  anything is read;
* :meth:`OffloadRequest.plan` places the model built on the meta device: whole modules (a no-split module,
  e.g. a decoder layer, is never cut) in order GPU(s) -> CPU -> disk, each device filled up to its budget;
  when some modules go to disk, the device they run on keeps room for the largest of them;
* :meth:`OffloadRequest.wrap` is the checkpoint the loader reads: a tensor of a module placed on disk is not
  read (the loader gets a meta tensor of its shape) but recorded in the :class:`OffloadStore`, either where
  it lies in the checkpoint's safetensors file or copied into ``offload_folder``; the other tensors are read
  with plain file reads (not through a memory map, whose touched pages would count in the process's memory);
* :meth:`OffloadRequest.dispatch` moves the in-memory modules to their devices, registers forward hooks that
  load a disk module's weights before its forward and drop them after, and records ``model.hf_device_map``.

The reference does the same with ``accelerate``; the kernel does not depend on it.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .devices import AUTOMATIC_DEVICE_MAPS, check_device
from .devices import available_memory as system_available_memory
from .errors import CheckpointError, ConfigError, DeviceError
from .formats.safetensors_format import read_bytes_into, tensor_entries

if TYPE_CHECKING:
    import torch
    from torch import nn

DISK = "disk"
INDEX_NAME = "index.json"
_UNITS = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?[Bb])\s*$", re.IGNORECASE)
_SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}  # fmt: skip


# -- sizes and devices ---------------------------------------------------------------------------------------
def parse_size(value: Any, argument: str = "max_memory") -> int:
    """Bytes from an int (bytes) or a string such as ``"12GiB"``, ``"12 GiB"``, ``"300MB"``, ``"1.5GB"``
    (``GiB``/``MiB``/``KiB``: powers of 2, ``GB``/``MB``/``KB``: powers of 10, ``Gb``/``Mb``/``Kb``: bits, as
    in the reference)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{argument}={value}: a size in bytes cannot be negative")
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(
            f"{argument}={value!r} is not a size; use bytes as an int (300000000) or a number with a unit: "
            "'12GiB', '300MiB', '300MB', '1.5GB'"
        )
    number, unit = match.groups()
    size = float(number) * _UNITS[unit.upper()]
    bits = unit.endswith("b") and "i" not in unit.lower()  # "8Mb": megabits, as the reference reads it
    return int(size // 8 if bits else size)


def device_key(key: Any, argument: str = "max_memory") -> Any:
    """A ``max_memory`` / ``device_map`` device as the reference writes it in ``hf_device_map``: an int for a
    CUDA device, ``"cpu"``, ``"mps"`` or ``"disk"``; checks that the device exists."""
    if key in ("cpu", DISK, "mps"):
        if key == "mps":
            check_device("mps", f"{argument}[{key!r}]")
        return key
    usage = "use GPU indices (0, 1 ...), 'cuda:0', 'mps', 'cpu' or 'disk'"
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise DeviceError(f"{argument} has the key {key!r}, which is not a device; {usage}")
    if isinstance(key, str) and not re.fullmatch(r"cuda(:\d+)?", key):
        raise DeviceError(f"{argument} has the key {key!r}, which is not a device; {usage}")
    if isinstance(key, int) and key < 0:
        raise DeviceError(f"{argument} has the key {key}: GPU indices are 0 or more; {usage}")
    import torch

    index = key if isinstance(key, int) else int(key.partition(":")[2] or 0)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index >= count:
        have = f"{count} GPU(s) (0 to {count - 1})" if count else "no GPU"
        raise DeviceError(
            f"{argument} has the key {key!r}, but this machine has {have}; drop that key (give the memory to "
            "'cpu' instead) or run on a machine with that GPU"
        )
    return index


def _torch_device(key: Any) -> torch.device:
    import torch

    return torch.device("cuda", key) if isinstance(key, int) else torch.device("cpu" if key == DISK else key)


def available_memory() -> dict[Any, int]:
    """Free memory per device when ``max_memory`` is not given: 90% of each GPU's free memory, the CPU's
    available memory (``MemAvailable``), unlimited disk."""
    import torch

    budgets: dict[Any, int] = {}
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            budgets[index] = int(torch.cuda.mem_get_info(index)[0] * 0.9)
    budgets["cpu"] = _cpu_available()
    return budgets


def _cpu_available() -> int:
    available = system_available_memory()
    return 2**62 if available is None else available


# -- the request ---------------------------------------------------------------------------------------------
def _flag(kwargs: dict[str, Any], name: str) -> bool | None:
    value = kwargs.pop(name, None)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} must be True or False")
    return value


@attrs.define
class OffloadRequest:
    """The big-model arguments of one ``from_pretrained`` call, checked."""

    device_map: Any
    max_memory: dict[Any, int] | None = None
    offload_folder: Path | None = None
    offload_state_dict: bool = False
    plan_: dict[str, Any] | None = None
    store: OffloadStore | None = None
    main: Any = "cpu"  # where modules on disk run: the first device filled

    # -- placing
    def plan(self, model: nn.Module, dtype: torch.dtype, quantized: bool = False) -> dict[str, Any]:
        """The ``device_map`` the model is loaded with: the user's dict, or the placement of an automatic one."""
        if isinstance(self.device_map, dict):
            placement = {str(k): (DISK if v == DISK else v) for k, v in self.device_map.items()}
            _check_prefixes(model, placement)
            self.main = next((v for v in placement.values() if v != DISK), "cpu")
        else:
            budgets = self.budgets(model, dtype)
            placement = plan_placement(model, dtype, budgets)
            self.main = budgets[0][0] if budgets[0][0] != DISK else "cpu"
        if DISK in placement.values():
            if quantized:
                raise ConfigError(
                    "device_map: offloading modules of a quantized model to disk is not supported; give the model "
                    "more max_memory, or load it without quantization_config"
                )
            if self.offload_folder is None:
                on_disk = [k or "''" for k, v in placement.items() if v == DISK]
                why = (
                    f"device_map puts {', '.join(on_disk[:3])} on disk"
                    if isinstance(self.device_map, dict)
                    else f"device_map={self.device_map!r} places modules on disk (the model is larger than max_memory)"
                )
                raise ConfigError(
                    f"{why}, but no offload_folder was given; pass offload_folder='a/folder' for their weights, or "
                    "give the model more memory"
                )
            self.offload_folder.mkdir(parents=True, exist_ok=True)
            self.store = OffloadStore(self.offload_folder)
        self.plan_ = placement
        return placement

    def budgets(self, model: nn.Module, dtype: torch.dtype) -> list[tuple[Any, int | None]]:
        """(device, bytes) in the order devices are filled; disk last (unbounded unless max_memory says)."""
        memory = self.max_memory if self.max_memory is not None else available_memory()
        gpus = sorted(k for k in memory if isinstance(k, int))
        if self.max_memory is None and len(gpus) > 1 and self.device_map in ("auto", "balanced", "balanced_low_0"):
            # balanced: each GPU gets its share of the model (and room for a layer), GPU 0 little for balanced_low_0
            total = sum(_tensor_sizes(model, dtype).values())
            share = math.ceil(total / (len(gpus) - (self.device_map == "balanced_low_0"))) + _largest_unit(model, dtype)
            for gpu in gpus:
                low = self.device_map == "balanced_low_0" and gpu == gpus[0]
                memory[gpu] = min(memory[gpu], _largest_unit(model, dtype) if low else share)
        order = gpus + [k for k in ("mps", "cpu", DISK) if k in memory]
        budgets: list[tuple[Any, int | None]] = [(k, memory[k]) for k in order]
        return budgets if DISK in memory else [*budgets, (DISK, None)]

    # -- reading
    def wrap(
        self, source: Mapping[str, Any], model: nn.Module, files: list[Path], dtype: torch.dtype
    ) -> Mapping[str, Any]:
        """The checkpoint as the loader reads it here (see the module docstring)."""
        assert self.plan_ is not None
        key_map = model._checkpoint_key_map(set(source.keys()))
        on_disk: dict[str, str] = {}
        state = model.state_dict(keep_vars=True)
        for name, key in key_map.items():
            current = state[name]
            if _device_of(name, self.plan_) == DISK and current.is_floating_point():
                on_disk[key] = name
        headers = _safetensors_headers(files)
        return _PlacedSource(source, headers, on_disk, self.store, self.offload_state_dict, dtype)

    # -- running
    def dispatch(self, model: nn.Module) -> None:
        """Move each module to its device, hook the disk modules, record ``model.hf_device_map``."""
        assert self.plan_ is not None
        placement = self.plan_
        main = _torch_device(self.main)
        if self.store is not None:
            self.store.write_index()
        named = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers())}
        offloaded: dict[str, list[str]] = {}
        if self.store is not None:  # a tied tensor (an output head sharing the embedding) read from the same entry
            stored = {id(named[n]): entry for n, entry in self.store.entries.items() if n in named}
            for name, tensor in named.items():
                if name not in self.store.entries and id(tensor) in stored:
                    self.store.entries[name] = stored[id(tensor)]
        for name, tensor in named.items():
            prefix = _prefix_of(name, placement)
            target = placement[prefix]
            if target == DISK and self.store is not None and name in self.store.entries:
                offloaded.setdefault(prefix, []).append(name)
                continue
            wanted = main if target == DISK else _torch_device(target)
            if tensor.device != wanted and not tensor.is_meta:
                _replace(model, name, tensor.to(wanted))
        execution = {
            prefix: (main if target == DISK else _torch_device(target)) for prefix, target in placement.items()
        }
        align = len(set(execution.values())) > 1
        no_split = _no_split(model)
        for prefix, device in execution.items():
            names = offloaded.get(prefix, [])
            if names:  # loaded per no-split module or leaf (a container on disk in a dict device_map is split)
                units = _load_units(model, prefix, no_split)
                for unit, module in units:
                    mine = [n for n in names if _prefix_of(n, dict.fromkeys(u for u, _ in units), None) == unit]
                    _hook(model, module, device, mine, self.store, align)
            elif align:
                for module in _called_modules(_module_at(model, prefix)):
                    _hook(model, module, device, [], None, align)
        if align:
            model.register_forward_hook(_outputs_to_input_device, with_kwargs=True)
            model.register_forward_pre_hook(_remember_input_device, with_kwargs=True)
        user_dict = isinstance(self.device_map, dict)
        model.hf_device_map = dict(self.device_map) if user_dict else collapse(model, placement)
        model.__dict__["_offload_store"] = self.store
        model.__dict__["_offload_main_device"] = main  # model.device while its first weights are on disk


def offload_request(kwargs: dict[str, Any], device_map: Any, device: Any = None) -> OffloadRequest | None:
    """Pop and check ``max_memory``, ``offload_folder``, ``offload_state_dict``, ``offload_buffers`` and
    ``low_cpu_mem_usage`` from ``from_pretrained``'s kwargs; None when the plain device placement applies
    (no ``device_map``, a single device, or a dict without disk entries). ``device``: ``from_pretrained``'s,
    which cannot be combined with a placement made here."""
    max_memory = kwargs.pop("max_memory", None)
    folder = kwargs.pop("offload_folder", None)
    state_dict = _flag(kwargs, "offload_state_dict")
    buffers = _flag(kwargs, "offload_buffers")
    low_cpu = _flag(kwargs, "low_cpu_mem_usage")
    automatic = isinstance(device_map, str) and device_map in AUTOMATIC_DEVICE_MAPS
    with_disk = isinstance(device_map, dict) and DISK in device_map.values()
    given = [n for n, v in (("max_memory", max_memory), ("offload_folder", folder), ("offload_state_dict", state_dict or None))
             if v is not None]  # fmt: skip
    if device_map is None and given:
        raise ConfigError(
            f"{', '.join(given)} only apply(ies) to a model placed with device_map; pass device_map='auto' "
            "(or a dict) with it, or drop it"
        )
    if low_cpu is False and device_map is not None:
        raise ConfigError(
            "low_cpu_mem_usage=False cannot be combined with device_map: placing modules needs the model built "
            "without weights first; drop low_cpu_mem_usage=False"
        )
    if buffers:
        raise ConfigError(
            "offload_buffers=True is not supported: buffers of modules on disk stay in memory (they are small); "
            "drop offload_buffers"
        )
    if max_memory is not None and not automatic:
        raise ConfigError(
            f"max_memory applies to an automatic device_map ('auto', 'balanced', 'sequential'), not to "
            f"device_map={device_map!r:.80}, which already places every module; drop one of them"
        )
    if device is not None and (automatic or with_disk):
        raise ConfigError(
            f"device={device!r} and device_map={device_map!r:.80}: the device_map places the modules itself (on "
            "several devices, or disk); pass one of them"
        )
    if not (automatic or with_disk):
        if folder is not None or state_dict:
            raise ConfigError(
                f"offload_folder/offload_state_dict: device_map={device_map!r:.80} places nothing on disk; use "
                "device_map='auto' with max_memory, or a dict with 'disk' entries, or drop them"
            )
        return None
    memory = None
    if max_memory is not None:
        if not isinstance(max_memory, Mapping) or not max_memory:
            raise ConfigError(
                f"max_memory={max_memory!r:.80} must be a dict of device -> size, e.g. {{0: '2GiB', 'cpu': '300MiB'}}"
            )
        memory = {}
        for key, value in max_memory.items():
            normalised = device_key(key)
            memory[normalised] = parse_size(value, f"max_memory[{key!r}]")
    return OffloadRequest(device_map, memory, _check_folder(folder) if folder is not None else None, bool(state_dict))


def _check_folder(folder: Any) -> Path:
    if not isinstance(folder, (str, os.PathLike)) or not str(folder):
        raise ConfigError(f"offload_folder={folder!r:.80} must be a folder path")
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"offload_folder={str(folder)!r} is a file; pass a folder (it is created if missing)")
    return path


# -- placement -----------------------------------------------------------------------------------------------
def _tensor_sizes(module: nn.Module, dtype: torch.dtype, prefix: str = "") -> dict[int, int]:
    """id(tensor) -> bytes it takes once loaded (floating-point parameters in ``dtype``), each tensor once."""
    import torch

    sizes: dict[int, int] = {}
    for _, param in module.named_parameters():
        size = dtype.itemsize if param.is_floating_point() else param.element_size()
        sizes[id(param)] = param.numel() * size
    for _, buffer in module.named_buffers():
        if isinstance(buffer, torch.Tensor):
            sizes[id(buffer)] = buffer.numel() * buffer.element_size()
    return sizes


def _no_split(model: nn.Module) -> set[str]:
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return names


def _units(model: nn.Module, name: str, module: nn.Module, no_split: set[str]) -> list[tuple[str, nn.Module | None]]:
    """What a module splits into: its children, then its own tensors as single units (module None)."""
    children: list[tuple[str, nn.Module | None]] = [
        (f"{name}.{child}" if name else child, m) for child, m in module.named_children()
    ]
    own = [*module._parameters, *module._buffers]
    return children + [(f"{name}.{t}" if name else t, None) for t in own if getattr(module, t) is not None]


def _unit_tensors(model: nn.Module, name: str, module: nn.Module | None, dtype: torch.dtype) -> dict[int, int]:
    if module is not None:
        return _tensor_sizes(module, dtype)
    owner_name, _, attr = name.rpartition(".")
    owner = model.get_submodule(owner_name)
    tensor = getattr(owner, attr)
    size = dtype.itemsize if tensor.is_floating_point() and attr in owner._parameters else tensor.element_size()
    return {id(tensor): tensor.numel() * size}


def _largest_unit(model: nn.Module, dtype: torch.dtype) -> int:
    no_split = _no_split(model)
    sizes = [sum(_tensor_sizes(m, dtype).values()) for m in model.modules() if type(m).__name__ in no_split]
    leaves = [sum(_tensor_sizes(m, dtype).values()) for m in model.modules() if not list(m.children())]
    return max(sizes or leaves or [0])


def plan_placement(model: nn.Module, dtype: torch.dtype, budgets: list[tuple[Any, int | None]]) -> dict[str, Any]:
    """Module name -> device (an int for a GPU, ``"cpu"``, ``"disk"``): modules in order, each on the current
    device while it fits its budget, split into its children when it does not (unless it is a no-split module),
    else on the next device. Tied tensors share the device of the first module that holds them. When modules go
    to disk, the first device (where they run) keeps room for the largest module placed there."""
    placement, _ = _place(model, dtype, budgets, reserve=0)
    if DISK not in placement.values():
        return placement
    reserve = _largest_unit(model, dtype)
    for _ in range(3):  # room for the largest layer; more if a larger module (an embedding) still ends on disk
        placement, (largest, name) = _place(model, dtype, budgets, reserve=reserve)
        if largest <= reserve:
            break
        reserve = largest
    main, budget = budgets[0]
    if main != DISK and budget is not None and budget < largest:
        module = model.get_submodule(name) if name in dict(model.named_modules()) else None
        what = "one layer" if type(module).__name__ in _no_split(model) else "a module placed on disk"
        raise ConfigError(
            f"max_memory[{main!r}]={budget} bytes is smaller than {what} ('{name}', {largest} bytes): modules "
            f"offloaded to disk are loaded onto {main!r} one at a time to run. Raise max_memory[{main!r}] to at "
            f"least {largest} bytes"
        )
    return placement


def _place(
    model: nn.Module, dtype: torch.dtype, budgets: list[tuple[Any, int | None]], reserve: int
) -> tuple[dict[str, Any], tuple[int, str]]:
    no_split = _no_split(model)
    queue = _units(model, "", model, no_split)
    placed: dict[str, Any] = {}
    where: dict[int, Any] = {}  # id(tensor) -> device already holding it
    used = [0] * len(budgets)
    current = 0
    largest_on_disk = (0, "")
    while queue:
        name, module = queue.pop(0)
        sizes = _unit_tensors(model, name, module, dtype)
        new = sum(size for key, size in sizes.items() if key not in where)
        tied = next((where[key] for key in sizes if key in where), None)
        if tied is not None:  # a module sharing a tensor goes where that tensor already is
            placed[name] = tied
            used[[k for k, _ in budgets].index(tied)] += new
            where.update(dict.fromkeys(sizes, tied))
            continue
        while True:
            key, budget = budgets[current]
            limit = None if budget is None else budget - (reserve if current == 0 else 0)
            splittable = module is not None and type(module).__name__ not in no_split and list(module.children())
            if key == DISK and splittable:  # loaded per no-split module (or leaf): the unit a forward hook can load
                queue[:0] = _units(model, name, module, no_split)
                break
            if limit is None or used[current] + new <= limit:
                placed[name] = key
                used[current] += new
                where.update(dict.fromkeys(sizes, key))
                if key == DISK:
                    if new > largest_on_disk[0]:  # the first of the largest
                        largest_on_disk = (new, name)
                break
            if splittable:
                queue[:0] = _units(model, name, module, no_split)
                break
            current += 1
            if current == len(budgets):
                raise ConfigError(
                    f"max_memory: the model does not fit ('{name}' needs {new} bytes and every device is full, "
                    f"disk included); raise max_memory['disk'] or drop it"
                )
    return placed, largest_on_disk


def collapse(model: nn.Module, placement: dict[str, Any]) -> dict[str, Any]:
    """``placement`` with every module whose entries all name one device written once (``{"": "cpu"}`` for a
    model on one device), as the reference reports ``hf_device_map``."""
    names = list(placement)

    def walk(prefix: str, module: nn.Module) -> dict[str, Any]:
        inside = [n for n in names if not prefix or n == prefix or n.startswith(prefix + ".")]
        values = {repr(placement[n]) for n in inside}
        if len(values) == 1 and inside:
            return {prefix: placement[inside[0]]}
        if prefix in placement:
            return {prefix: placement[prefix]}
        result: dict[str, Any] = {}
        for child, sub in module.named_children():
            result.update(walk(f"{prefix}.{child}" if prefix else child, sub))
        for n in inside:  # tensor entries
            if n.rpartition(".")[0] == prefix and n not in result and not any(n.startswith(r + ".") for r in result):
                result[n] = placement[n]
        return result

    return walk("", model)


def _check_prefixes(model: nn.Module, placement: dict[str, Any]) -> None:
    names = {n for n, _ in model.named_modules()} | {n for n, _ in model.named_parameters()}
    names |= {n for n, _ in model.named_buffers()}
    unknown = [k for k in placement if k and k not in names]
    if unknown:
        raise ConfigError(
            f"device_map names {', '.join(repr(k) for k in unknown[:5])}, which the model does not have; use module "
            "names such as 'model.layers.0' (see model.named_modules())"
        )
    uncovered = [n for n, _ in model.named_parameters() if _prefix_of(n, placement, None) is None]
    if uncovered:
        raise ConfigError(
            f"device_map gives no device for {', '.join(uncovered[:5])}; add their module prefixes (or '') to it"
        )


def _prefix_of(name: str, placement: Mapping[str, Any], default: Any = "") -> Any:
    best = default
    for prefix in placement:
        if (not prefix or name == prefix or name.startswith(prefix + ".")) and (
            best is None or len(prefix) >= len(best)
        ):
            best = prefix
    return best


def _device_of(name: str, placement: Mapping[str, Any]) -> Any:
    prefix = _prefix_of(name, placement, None)
    return placement.get(prefix) if prefix is not None else None


# -- the store of offloaded tensors --------------------------------------------------------------------------
@attrs.define
class OffloadedTensor:
    """Where one offloaded tensor lies: ``offset`` bytes into ``path``, stored as ``stored`` dtype, ``shape``,
    loaded as ``dtype``."""

    path: Path
    offset: int
    stored: str
    shape: tuple[int, ...]
    dtype: str

    def load(self, device: torch.device) -> torch.Tensor:
        import torch

        stored = getattr(torch, self.stored)
        count = math.prod(self.shape)
        data = torch.empty(count * stored.itemsize, dtype=torch.uint8)
        if count:
            read = read_bytes_into(self.path, self.offset, data)
            if read != data.numel():
                raise CheckpointError(
                    f"{self.path} ended after {read} of {data.numel()} bytes of an offloaded tensor; the file was "
                    "changed or truncated after loading. Load the model again"
                )
        tensor = data.view(stored).view(self.shape)
        return tensor.to(device=device, dtype=getattr(torch, self.dtype))


@attrs.define
class OffloadStore:
    """Parameter name -> :class:`OffloadedTensor`, with its index written into the offload folder."""

    folder: Path
    entries: dict[str, OffloadedTensor] = attrs.Factory(dict)

    def add_file_tensor(
        self, name: str, path: Path, offset: int, stored: str, shape: tuple[int, ...], dtype: str
    ) -> None:
        self.entries[name] = OffloadedTensor(path, offset, stored, shape, dtype)

    def add_copy(self, name: str, tensor: torch.Tensor) -> None:
        """Write ``tensor`` as raw bytes into ``<folder>/<name>.dat``."""
        import torch

        path = self.folder / f"{name}.dat"
        data = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        with open(path, "wb") as handle:
            handle.write(memoryview(data.numpy()))
        dtype = str(tensor.dtype).removeprefix("torch.")
        self.entries[name] = OffloadedTensor(path, 0, dtype, tuple(tensor.shape), dtype)

    def write_index(self) -> None:
        index = {
            name: {"file": str(entry.path), "offset": entry.offset, "stored_dtype": entry.stored, "dtype": entry.dtype,
                   "shape": list(entry.shape)}
            for name, entry in self.entries.items()
        }  # fmt: skip
        (self.folder / INDEX_NAME).write_text(json.dumps(index, indent=1))


def _safetensors_headers(files: list[Path]) -> dict[str, tuple[Path, int, str, tuple[int, ...]]] | None:
    """Tensor name -> (file, byte offset, dtype, shape) from the headers of safetensors files; None for another
    format."""
    if not files or any(Path(f).suffix != ".safetensors" for f in files):
        return None
    found: dict[str, tuple[Path, int, str, tuple[int, ...]]] = {}
    for path in files:
        for name, (offset, stored, shape) in tensor_entries(Path(path)).items():
            dtype = _SAFETENSORS_DTYPES.get(stored)
            if dtype is None:
                return None  # a dtype this reader does not know: the format's own reader handles the file
            found[name] = (Path(path), offset, dtype, shape)
    return found


class _PlacedSource(Mapping[str, Any]):
    """The checkpoint as an offloading load reads it: disk tensors are recorded, not read (a meta tensor stands
    for each), the others are read with plain file reads where the checkpoint is safetensors."""

    def __init__(
        self,
        inner: Mapping[str, Any],
        headers: dict[str, tuple[Path, int, str, tuple[int, ...]]] | None,
        on_disk: dict[str, str],
        store: OffloadStore | None,
        copy: bool,
        dtype: torch.dtype,
    ) -> None:
        self._inner, self._headers, self._on_disk, self._store, self._copy, self._dtype = (
            inner, headers, on_disk, store, copy, dtype,
        )  # fmt: skip
        if hasattr(inner, "file_of"):
            self.file_of = inner.file_of

    def __getitem__(self, key: str) -> Any:
        import torch

        header = self._headers.get(key) if self._headers is not None else None
        name = self._on_disk.get(key)
        if name is not None and self._store is not None:
            target = str(self._dtype).removeprefix("torch.")
            if header is not None and not self._copy:
                path, offset, stored, shape = header
                self._store.add_file_tensor(name, path, offset, stored, shape, target)
                return torch.empty(shape, dtype=getattr(torch, stored), device="meta")
            tensor = self._read(key, header)
            tensor = tensor.to(self._dtype) if tensor.is_floating_point() else tensor
            self._store.add_copy(name, tensor)
            return torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
        return self._read(key, header)

    def _read(self, key: str, header: tuple[Path, int, str, tuple[int, ...]] | None) -> Any:
        if header is None:
            return self._inner[key]
        path, offset, stored, shape = header
        return OffloadedTensor(path, offset, stored, shape, stored).load(_torch_device("cpu"))

    def __iter__(self) -> Iterator[str]:
        return iter(self._inner)

    def __len__(self) -> int:
        return len(self._inner)


# -- running -------------------------------------------------------------------------------------------------
def _module_at(model: nn.Module, prefix: str) -> nn.Module:
    try:
        return model.get_submodule(prefix)
    except AttributeError:  # a tensor entry: its owner runs it
        return model.get_submodule(prefix.rpartition(".")[0])


def _replace(model: nn.Module, name: str, tensor: torch.Tensor) -> None:
    from torch import nn

    owner_name, _, attr = name.rpartition(".")
    owner = model.get_submodule(owner_name)
    if attr in owner._parameters:
        old = owner._parameters[attr]
        owner._parameters[attr] = nn.Parameter(tensor, requires_grad=bool(old is not None and old.requires_grad))
    else:
        owner._buffers[attr] = tensor


def _to_device(value: Any, device: torch.device) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device) if value.device != device and not value.is_meta else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_to_device(v, device) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict) and type(value) is dict:
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def _hook(
    model: nn.Module,
    module: nn.Module,
    device: torch.device,
    names: list[str],
    store: OffloadStore | None,
    align: bool,
) -> None:
    """Before ``module``'s forward: inputs to ``device`` (``align``), offloaded ``names`` loaded there; after it:
    those weights dropped again (their meta parameters back in place)."""
    from torch import nn

    owners = []
    for name in names:
        owner_name, _, attr = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        owners.append((owner, attr, owner._parameters.get(attr), name))

    def before(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        assert store is not None or not owners
        for owner, attr, _meta, name in owners:
            tensor = store.entries[name].load(device)  # type: ignore[union-attr]
            if attr in owner._parameters:
                owner._parameters[attr] = nn.Parameter(tensor, requires_grad=False)
            else:
                owner._buffers[attr] = tensor
        if align:
            return _to_device(args, device), _to_device(kwargs, device)
        return args, kwargs

    def after(_: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        for owner, attr, meta, _name in owners:
            if attr in owner._parameters:
                owner._parameters[attr] = meta
        return None

    module.register_forward_pre_hook(before, with_kwargs=True)
    if owners:
        module.register_forward_hook(after, always_call=True)


def _load_units(model: nn.Module, prefix: str, no_split: set[str]) -> list[tuple[str, nn.Module]]:
    """The modules whose forward hooks load what ``prefix`` holds on disk: ``prefix`` itself when it is a
    no-split module or a leaf, else its children's units and itself for the tensors it holds directly."""
    try:
        module = model.get_submodule(prefix)
    except AttributeError:  # a tensor entry: its owner loads it
        return [(prefix, model.get_submodule(prefix.rpartition(".")[0]))]
    children = list(module.named_children())
    if type(module).__name__ in no_split or not children:
        return [(prefix, module)]
    units = [u for child, _ in children for u in _load_units(model, f"{prefix}.{child}" if prefix else child, no_split)]
    if module._parameters or module._buffers:
        units.append((prefix, module))
    return units


def _called_modules(module: nn.Module) -> list[nn.Module]:
    """``module``, or for a container without a forward (``nn.ModuleList``) the modules in it that are called."""
    from torch import nn

    if type(module).forward is not nn.Module.forward:
        return [module]
    return [m for child in module.children() for m in _called_modules(child)]


def _remember_input_device(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    import torch

    first = next((v for v in [*args, *kwargs.values()] if isinstance(v, torch.Tensor)), None)
    model.__dict__["_offload_input_device"] = first.device if first is not None else None


def _outputs_to_input_device(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
    device = model.__dict__.get("_offload_input_device")
    if device is None:
        return output
    if isinstance(output, dict):  # a ModelOutput: tensors moved in place, the cache left where its layers are
        for key, value in list(output.items()):
            output[key] = _to_device(value, device)
        return output
    return _to_device(output, device)

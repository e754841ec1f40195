"""Checkpoint folders ``checkpoint-<step>/``: writing them atomically, finding the latest, and reading them back.

A checkpoint holds the model (safetensors, through ``save_pretrained``), ``optimizer.pt``, ``scheduler.pt``,
``rng_state.pth`` (python, numpy and torch generators as plain values; one ``rng_state_<rank>.pth`` per process
in a distributed run, all written by rank 0 into the one staged folder) and ``trainer_state.json``. Every
``.pt``/``.pth`` file loads with ``torch.load(..., weights_only=True)``.

A sharded FSDP checkpoint (``fsdp_config={"state_dict_type": "SHARDED_STATE_DICT"}``) holds, instead of the
weights and ``optimizer.pt``, the folders ``pytorch_model_fsdp_0/`` and ``optimizer_0/`` (the reference's names)
written by every process with ``torch.distributed.checkpoint``, beside ``config.json``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; staging folders of killed saves are then left alone
    fcntl = None  # type: ignore[assignment]

import numpy as np
import torch

from microformers import CheckpointError

PREFIX = "checkpoint"
STATE_NAME = "trainer_state.json"
OPTIMIZER_NAME = "optimizer.pt"
SCHEDULER_NAME = "scheduler.pt"
RNG_NAME = "rng_state.pth"
ARGS_NAME = "training_args.json"
WEIGHTS_NAMES = ("model.safetensors", "model.safetensors.index.json")
SHARDED_MODEL_DIR = "pytorch_model_fsdp_0"  # torch.distributed.checkpoint folders of a sharded FSDP checkpoint
SHARDED_OPTIMIZER_DIR = "optimizer_0"
DCP_METADATA = ".metadata"  # written last by torch.distributed.checkpoint, once every process's shards are
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # a model training an adapter saves only the adapter
_CHECKPOINT_RE = re.compile(rf"^{PREFIX}-(\d+)$")
# staging folders of ``staged_folder`` saves of a checkpoint, and the nested ones ``save_pretrained`` makes beside them
_STAGING_RE = re.compile(rf"^\.+({PREFIX}-\d+)\.microformers-(save|old)-")


def checkpoint_folders(output_dir: str | os.PathLike[str]) -> list[Path]:
    """``checkpoint-<step>`` folders in ``output_dir``, oldest step first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def is_sharded(folder: Path) -> bool:
    """A sharded FSDP checkpoint: its weights are a ``torch.distributed.checkpoint`` folder."""
    return (folder / SHARDED_MODEL_DIR / DCP_METADATA).is_file()


def is_complete(folder: Path) -> bool:
    has_weights = any((folder / n).is_file() for n in WEIGHTS_NAMES) or is_sharded(folder)
    return (folder / STATE_NAME).is_file() and has_weights


def get_last_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest complete checkpoint folder in ``output_dir`` (one cut short by a crash is passed over)."""
    for folder in reversed(checkpoint_folders(output_dir)):
        if is_complete(folder):
            return str(folder)
    return None


def rng_file_name(rank: int, world_size: int) -> str:
    """The reference's names: ``rng_state.pth`` for one process, ``rng_state_<rank>.pth`` for each of several."""
    return f"rng_state_{rank}.pth" if world_size > 1 else RNG_NAME


def rng_state() -> dict[str, Any]:
    """The python, numpy and torch generator states as tensors and plain values (``weights_only``-loadable)."""
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": {"version": version, "state": torch.tensor(mt, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "cpu": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def require_checkpoint(folder: str | os.PathLike[str], need_optimizer: bool) -> Path:
    """``folder`` as a Path if it is a whole checkpoint, else a ``CheckpointError`` naming what is missing."""
    path = Path(folder)
    if not path.is_dir():
        raise CheckpointError(
            f"resume_from_checkpoint: {path} is not a folder; pass a checkpoint-<step> folder written by Trainer, "
            "or True to pick the latest in output_dir"
        )
    sharded = is_sharded(path)
    optimizer_file = f"{SHARDED_OPTIMIZER_DIR}/{DCP_METADATA}" if sharded else OPTIMIZER_NAME
    needed = [STATE_NAME, *([optimizer_file, SCHEDULER_NAME] if need_optimizer else [])]
    for name in needed:
        if not (path / name).is_file():
            raise CheckpointError(
                f"resume_from_checkpoint: {path / name} is missing, so {path} is not a complete checkpoint; "
                "resume from an earlier checkpoint-<step> folder"
            )
    if not sharded and not any((path / n).is_file() for n in (*WEIGHTS_NAMES, ADAPTER_WEIGHTS)):
        raise CheckpointError(
            f"resume_from_checkpoint: {path / WEIGHTS_NAMES[0]} is missing; the checkpoint is incomplete"
        )
    if need_optimizer and not any(path.glob("rng_state*.pth")):
        # a full checkpoint always holds its generators; without them dropout and shuffling would not repeat the run
        raise CheckpointError(
            f"resume_from_checkpoint: {path / RNG_NAME} is missing, so {path} is not a complete checkpoint "
            "(the random generators cannot be restored); resume from an earlier checkpoint-<step> folder"
        )
    return path


def load_torch_file(path: Path) -> Any:
    """``torch.load(path, weights_only=True)``, with a ``CheckpointError`` naming the file when it is damaged."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(
            f"{path} could not be read ({type(exc).__name__}: {exc}); the checkpoint is corrupt — "
            "resume from an earlier checkpoint-<step> folder"
        ) from exc


def load_rng_file(path: Path) -> Any:
    """A generator-state file: ours, or the reference's (numpy's state as an array, python's as a tuple),
    read with ``weights_only=True`` allowing numpy's array reconstruction only, and turned into ours."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray
        allowed = [multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]
        try:
            with torch.serialization.safe_globals(allowed):
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise CheckpointError(
                f"{path} could not be read ({type(exc).__name__}: {exc}); the checkpoint is corrupt — "
                "resume from an earlier checkpoint-<step> folder"
            ) from exc
    if isinstance(state, dict) and isinstance(state.get("python"), tuple) and len(state["python"]) == 3:
        version, mt, gauss = state["python"]
        if isinstance(mt, (tuple, list)) and all(isinstance(x, int) for x in mt):
            mt = torch.tensor(mt, dtype=torch.int64)
        state["python"] = {"version": version, "state": mt, "gauss": gauss}
    if isinstance(state, dict) and isinstance(state.get("numpy"), tuple) and len(state["numpy"]) == 5:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        if isinstance(keys, np.ndarray) and keys.dtype == np.uint32:
            keys = torch.from_numpy(keys.astype(np.int64))
        state["numpy"] = {"kind": kind, "keys": keys, "pos": pos, "has_gauss": has_gauss, "cached": cached}
    return state


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); the checkpoint is corrupt") from exc


def load_model_weights(model: torch.nn.Module, folder: Path) -> None:
    """Load the checkpoint's safetensors weights into ``model`` in place (tied weights may be absent)."""
    from safetensors.torch import load_file

    if (folder / ADAPTER_WEIGHTS).is_file() and not any((folder / n).is_file() for n in WEIGHTS_NAMES):
        if not getattr(model, "active_adapters", None) or not model.active_adapters():
            raise CheckpointError(
                f"{folder} holds an adapter ({ADAPTER_WEIGHTS}) but the model has none; add the same adapter "
                "(model.add_adapter(config)) before resuming"
            )
        model.load_adapter(str(folder), adapter_name=model.active_adapters()[0], hotswap=True, is_trainable=True)
        return

    index = folder / WEIGHTS_NAMES[1]
    files = shard_files(index) if index.is_file() else [WEIGHTS_NAMES[0]]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        try:
            state.update(load_file(folder / name))
        except Exception as exc:
            raise CheckpointError(
                f"{folder / name} could not be read ({type(exc).__name__}: {exc}); the checkpoint is corrupt"
            ) from exc
    tied = model.tied_parameter_names() if hasattr(model, "tied_parameter_names") else set()
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a tensor of another shape
        raise CheckpointError(f"{folder} does not match the model: {exc}") from exc
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"{folder} does not match the model: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}"
        )


def rotate(output_dir: str | os.PathLike[str], limit: int | None, keep: str | None) -> None:
    """Delete the oldest checkpoints beyond ``limit``, never the one named ``keep`` (the best model)."""
    if not limit:
        return
    folders = checkpoint_folders(output_dir)
    if keep is not None:
        kept = Path(keep).resolve()
        folders = [f for f in folders if f.resolve() != kept] + [f for f in folders if f.resolve() == kept]
        limit = max(limit, 2) if len(folders) > limit else limit
    for folder in folders[: max(0, len(folders) - limit)]:
        shutil.rmtree(folder, ignore_errors=True)


def shard_files(index: Path) -> list[str]:
    """The weight files a ``model.safetensors.index.json`` names, each a plain file name inside its folder."""
    data = load_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index} has no 'weight_map' of tensor names to file names; the checkpoint is corrupt")
    folder = index.parent
    files = sorted(set(weight_map.values()))
    for name in files:
        # read as written (no resolving): relative, and no ".." part that could climb out of the folder
        parts = Path(name.replace("\\", "/")).parts
        if not name or os.path.isabs(name) or Path(name).is_absolute() or ".." in parts or not parts:
            raise CheckpointError(
                f"{index} names the weight file {name!r}, which is not a file inside {folder}; a checkpoint reads "
                "only its own files — the index is damaged or was edited"
            )
    return files


def remove_stale_staging(output_dir: str | os.PathLike[str]) -> None:
    """Remove the staging folders that saves of checkpoints killed part-way left in ``output_dir`` (those of
    live saves are locked and kept); a checkpoint moved aside by an interrupted swap is put back."""
    root = Path(output_dir)
    if fcntl is None or not root.is_dir():
        return
    for path in root.iterdir():
        match = _STAGING_RE.match(path.name)
        if match is None or not path.is_dir():
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live save holds it
        os.close(fd)
        target = root / match.group(1)
        if (
            match.group(2) == "old"
            and not path.name.startswith("..")
            and not (target.is_dir() and any(target.iterdir()))
        ):
            with contextlib.suppress(OSError):
                if target.is_dir():
                    target.rmdir()
                os.rename(path, target)
                continue
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):  # the empty folder the killed save created for itself
            target.rmdir()


def _damaged(path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"{path} does not match the {what}: the file is damaged or belongs to another model, optimizer or run; "
        "resume from an earlier checkpoint-<step> folder"
    )


def _is_number(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_complex()
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _mismatch(expected: Any, got: Any, where: str, strict: bool = True) -> str | None:
    """How ``got`` differs in structure from ``expected`` (types, tensor dtypes and shapes), or None."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{where} is a {type(got).__name__}, not a tensor"
        if got.dtype != expected.dtype or got.shape != expected.shape:
            return (
                f"{where} is a {got.dtype} tensor of shape {tuple(got.shape)}, expected {expected.dtype} "
                f"{tuple(expected.shape)}"
            )
    elif isinstance(expected, bool):
        if not isinstance(got, bool):
            return f"{where} is {got!r}, expected a bool"
    elif isinstance(expected, int):
        if isinstance(got, bool) or not isinstance(got, int):
            return f"{where} is {got!r}, expected an integer"
    elif isinstance(expected, float):
        if not _is_number(got) or not math.isfinite(float(got)):
            return f"{where} is {got!r}, expected a finite number"
    elif expected is None:
        if got is not None and not isinstance(got, (bool, int, float)):
            return f"{where} is a {type(got).__name__}, expected None or a number"
    elif isinstance(expected, str):
        if not isinstance(got, str):
            return f"{where} is {got!r}, expected a string"
    elif isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{where} is a {type(got).__name__}, expected a dict"
        missing = [k for k in expected if k not in got] if strict else []
        if missing:
            return f"{where} lacks {missing}"
        for key in expected:
            if key in got and (problem := _mismatch(expected[key], got[key], f"{where}[{key!r}]", strict)):
                return problem
    elif isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return f"{where} is {type(got).__name__} {got!r:.80}, expected {len(expected)} items"
        for i, (e, g) in enumerate(zip(expected, got)):
            if problem := _mismatch(e, g, f"{where}[{i}]", strict):
                return problem
    return None


# optimizer state entries that are tensors of a shape derived from their parameter's
_MOMENTS = {
    "exp_avg": lambda shape: shape,
    "exp_avg_sq": lambda shape: shape,
    "max_exp_avg_sq": lambda shape: shape,
    "momentum_buffer": lambda shape: shape,
    "exp_avg_sq_row": lambda shape: shape[:-1],
    "exp_avg_sq_col": lambda shape: shape[:-2] + shape[-1:],
}


def _required_state(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> set[str]:
    from .optimization import Adafactor

    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return {"step", "exp_avg", "exp_avg_sq", *(["max_exp_avg_sq"] if group.get("amsgrad") else [])}
    if isinstance(optimizer, Adafactor):
        return {"step", "RMS"}
    return set()


def _hyperparameter_mismatch(ours: Any, group: dict[str, Any], key: str) -> str | None:
    """Numbers must be finite numbers, tuples of numbers tuples as long, flags flags (None counts as unset)."""
    if _is_number(ours) or isinstance(ours, tuple):
        if key not in group:
            return "is missing"
        got = group[key]
        values = list(got) if isinstance(ours, tuple) and isinstance(got, (list, tuple)) else [got]
        if isinstance(ours, tuple) and (not isinstance(got, (list, tuple)) or len(got) != len(ours)):
            return f"is {got!r:.80}, expected {len(ours)} numbers"
        if not all(_is_number(v) and math.isfinite(float(v)) for v in values):
            return f"is {got!r:.80}, expected finite numbers"
    elif (ours is None or isinstance(ours, bool)) and key in group and group[key] is not None:
        if not isinstance(group[key], bool):
            return f"is {group[key]!r:.80}, expected a bool"
    return None


def check_optimizer_state(saved: Any, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Refuse (``CheckpointError`` naming ``path``) an optimizer state dict that does not fit ``optimizer``:
    parameter groups and their sizes, hyperparameter types, and every moment's dtype and shape — a fused
    kernel given a moment of another shape would write out of bounds."""

    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"{_damaged(path, 'optimizer')} ({problem})")

    if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict):
        raise bad("it is not an optimizer state dict with 'state' and 'param_groups'")
    groups = saved.get("param_groups")
    if not isinstance(groups, list) or len(groups) != len(optimizer.param_groups):
        count = len(groups) if isinstance(groups, list) else type(groups).__name__
        raise bad(f"{count} parameter groups, the optimizer has {len(optimizer.param_groups)}")
    params: dict[int, tuple[torch.Tensor, dict[str, Any]]] = {}
    for i, (group, ours) in enumerate(zip(groups, optimizer.param_groups)):
        ids = group.get("params") if isinstance(group, dict) else None
        if not isinstance(ids, list) or len(ids) != len(ours["params"]):
            size = len(ids) if isinstance(ids, list) else "no"
            raise bad(f"parameter group {i} has {size} parameters, the optimizer's has {len(ours['params'])}")
        for key, value in ours.items():
            if key != "params" and (problem := _hyperparameter_mismatch(value, group, key)):
                raise bad(f"param_groups[{i}][{key!r}] {problem}")
        for pid, param in zip(ids, ours["params"]):
            if isinstance(pid, bool) or not isinstance(pid, int) or pid in params:
                raise bad(f"param_groups[{i}] lists the parameter id {pid!r} (ids are distinct integers)")
            params[pid] = (param, ours)
    for pid, entry in saved["state"].items():
        if pid not in params:
            raise bad(f"it holds state for parameter {pid!r}, which no parameter group lists")
        if not isinstance(entry, dict):
            raise bad(f"state[{pid!r}] is a {type(entry).__name__}, not a dict")
        param, group = params[pid]
        if entry and (missing := _required_state(optimizer, group) - set(entry)):
            raise bad(f"state[{pid!r}] lacks {sorted(missing)}")
        shape = tuple(param.shape)
        for key, value in entry.items():
            where = f"state[{pid!r}][{key!r}]"
            if key in _MOMENTS and not (key == "momentum_buffer" and value is None):
                want = _MOMENTS[key](shape)
                if not isinstance(value, torch.Tensor) or not value.is_floating_point() or tuple(value.shape) != want:
                    found = (
                        f"a {value.dtype} tensor of shape {tuple(value.shape)}"
                        if isinstance(value, torch.Tensor)
                        else type(value).__name__
                    )
                    raise bad(
                        f"{where} is {found}; the parameter of shape {shape} needs a float tensor of shape {want}"
                    )
            elif key in ("step", "RMS"):
                if not _is_number(value) or not math.isfinite(float(value)) or float(value) < 0:
                    raise bad(f"{where} is {value!r:.80}, expected a number >= 0")


def check_scheduler_state(saved: Any, scheduler: Any, path: Path) -> None:
    """Refuse a scheduler state dict whose counters and learning-rate lists do not fit ``scheduler``."""
    ours = scheduler.state_dict()
    expected = {k: ours[k] for k in ("base_lrs", "last_epoch", "_step_count", "_last_lr") if k in ours}
    if not isinstance(saved, dict):
        raise CheckpointError(f"{_damaged(path, 'schedule')} (it is a {type(saved).__name__}, not a state dict)")
    for key in ("base_lrs", "last_epoch"):
        if key in ours and key not in saved:
            raise CheckpointError(f"{_damaged(path, 'schedule')} (it lacks {key!r})")
    expected["base_lrs"] = [float(v) for v in expected.get("base_lrs", [])]
    expected["_last_lr"] = [float(v) for v in expected.get("_last_lr", [])]
    if problem := _mismatch(expected, saved, "state", strict=False):
        raise CheckpointError(f"{_damaged(path, 'schedule')} ({problem})")
    if isinstance(saved.get("last_epoch"), int) and saved["last_epoch"] < -1:
        raise CheckpointError(f"{_damaged(path, 'schedule')} (last_epoch is {saved['last_epoch']})")


def check_rng_state(saved: Any, path: Path) -> None:
    """Refuse a generator-state file that is not what :func:`rng_state` writes or that the generators reject."""
    expected = rng_state()
    expected.pop("cuda", None)
    if problem := _mismatch(expected, saved, "state"):
        raise CheckpointError(f"{_damaged(path, 'random generators')} ({problem})")
    try:  # on throwaway generators: a state they refuse is refused here, before training starts
        py, n = saved["python"], saved["numpy"]
        random.Random().setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
        np.random.RandomState().set_state(
            (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"])
        )
        torch.Generator().set_state(saved["cpu"])
    except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
        raise CheckpointError(f"{_damaged(path, 'random generators')} ({type(exc).__name__}: {exc})") from exc
    if "cuda" in saved and not (
        isinstance(saved["cuda"], (list, tuple)) and all(isinstance(t, torch.Tensor) for t in saved["cuda"])
    ):
        raise CheckpointError(f"{_damaged(path, 'random generators')} (state['cuda'] is not a list of tensors)")


def load_trainer_state(path: Path) -> Any:
    """``trainer_state.json`` as a ``TrainerState``; a ``CheckpointError`` naming it when it is not one."""
    import attrs

    from .trainer_callback import TrainerState

    data = load_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(
            f"{path} holds a {type(data).__name__}, not a trainer state object; the checkpoint is corrupt"
        )
    integers = ("global_step", "max_steps", "num_input_tokens_seen", "num_train_epochs")
    for key in integers:
        value = data.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(
                f"{path}: {key!r} is {value!r:.80}, expected an integer >= 0; the checkpoint is corrupt"
            )
    for key in ("epoch", "best_metric", "total_flos"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise CheckpointError(f"{path}: {key!r} is {value!r:.80}, expected a number; the checkpoint is corrupt")
    if not math.isfinite(data.get("epoch") or 0):
        raise CheckpointError(
            f"{path}: 'epoch' is {data['epoch']!r}, expected a finite number; the checkpoint is corrupt"
        )
    for key in ("logging_steps", "eval_steps", "save_steps", "train_batch_size"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise CheckpointError(
                f"{path}: {key!r} is {value!r:.80}, expected a number above 0; the checkpoint is corrupt"
            )
    for key, kind in (("stateful_callbacks", dict), ("trial_params", dict), ("is_hyper_param_search", bool)):
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            raise CheckpointError(
                f"{path}: {key!r} is {value!r:.80}, expected a {kind.__name__}; the checkpoint is corrupt"
            )
    for key in ("best_global_step",):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise CheckpointError(f"{path}: {key!r} is {value!r:.80}, expected an integer; the checkpoint is corrupt")
    if data.get("best_model_checkpoint") is not None and not isinstance(data["best_model_checkpoint"], str):
        raise CheckpointError(f"{path}: 'best_model_checkpoint' is not a path string; the checkpoint is corrupt")
    history = data.get("log_history", [])
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise CheckpointError(f"{path}: 'log_history' is not a list of objects; the checkpoint is corrupt")
    known = {a.name for a in attrs.fields(TrainerState)}
    try:
        return TrainerState(**{k: v for k, v in data.items() if k in known})
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path} is not a trainer state ({exc}); the checkpoint is corrupt") from exc

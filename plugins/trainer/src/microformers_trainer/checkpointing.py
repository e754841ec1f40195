"""Checkpoint folders ``checkpoint-<step>/``: writing them atomically, finding the latest, and reading them back.

A checkpoint holds the model (safetensors, through ``save_pretrained``), ``optimizer.pt``, ``scheduler.pt``,
``rng_state.pth`` (python, numpy and torch generators as plain values; one ``rng_state_<rank>.pth`` per process
in a distributed run, all written by rank 0 into the one staged folder) and ``trainer_state.json``. Every
``.pt``/``.pth`` file loads with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

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
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # a model training an adapter saves only the adapter
_CHECKPOINT_RE = re.compile(rf"^{PREFIX}-(\d+)$")


def checkpoint_folders(output_dir: str | os.PathLike[str]) -> list[Path]:
    """``checkpoint-<step>`` folders in ``output_dir``, oldest step first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def is_complete(folder: Path) -> bool:
    return (folder / STATE_NAME).is_file() and any((folder / n).is_file() for n in WEIGHTS_NAMES)


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
    needed = [STATE_NAME, *([OPTIMIZER_NAME, SCHEDULER_NAME] if need_optimizer else [])]
    for name in needed:
        if not (path / name).is_file():
            raise CheckpointError(
                f"resume_from_checkpoint: {path / name} is missing, so {path} is not a complete checkpoint; "
                "resume from an earlier checkpoint-<step> folder"
            )
    if not any((path / n).is_file() for n in (*WEIGHTS_NAMES, ADAPTER_WEIGHTS)):
        raise CheckpointError(
            f"resume_from_checkpoint: {path / WEIGHTS_NAMES[0]} is missing; the checkpoint is incomplete"
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
    files = sorted(set(load_json(index)["weight_map"].values())) if index.is_file() else [WEIGHTS_NAMES[0]]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        try:
            state.update(load_file(folder / name))
        except Exception as exc:
            raise CheckpointError(
                f"{folder / name} could not be read ({type(exc).__name__}: {exc}); the checkpoint is corrupt"
            ) from exc
    tied = model.tied_parameter_names() if hasattr(model, "tied_parameter_names") else set()
    result = model.load_state_dict(state, strict=False)
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

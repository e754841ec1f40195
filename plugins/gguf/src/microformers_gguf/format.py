"""The ``gguf`` checkpoint format: weights, config and tokenizer from one llama.cpp file."""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

from microformers.errors import CheckpointError, FileMissingError

from .architectures import TensorPlan, build_config
from .reader import GGUFFile, read_gguf

_CACHE_SIZE = 2
_cache: OrderedDict[tuple[str, int, int], GGUFFile] = OrderedDict()


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse ``path``, reusing the last parse while the file is unchanged (from_pretrained reads it three times)."""
    path = Path(path)
    try:
        stat = path.stat()
    except FileNotFoundError as exc:
        raise FileMissingError(f"GGUF file {path} does not exist; check the folder and the gguf_file name") from exc
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    cached = _cache.get(key)
    if cached is None:
        cached = read_gguf(path)
        _cache[key] = cached
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    _cache.move_to_end(key)
    return cached


def _single(files: list[Path] | tuple[Path, ...] | Path | str) -> Path:
    if isinstance(files, (str, os.PathLike)):
        return Path(files)
    files = list(files)
    if len(files) != 1:
        raise CheckpointError(f"a GGUF checkpoint is one file, but {len(files)} were given: {files}")
    return Path(files[0])


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if dtype is None or dtype == "auto":
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.")
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise CheckpointError(f"dtype={dtype!r} is not a floating-point torch dtype; use e.g. torch.float32")
    return value


def load_state_dict(gguf: GGUFFile, dtype: Any = None) -> dict[str, Any]:
    """Every mapped tensor, dequantised to ``dtype`` (float32 by default), under its Hugging Face name."""
    return _load_state_dict(gguf, dtype)


def _load_state_dict(gguf: GGUFFile, dtype: Any) -> dict[str, Any]:
    from .dequant import SUPPORTED_TYPES, is_supported

    torch_dtype = _torch_dtype(dtype)
    plan = TensorPlan(gguf)
    if plan.skipped:
        warnings.warn(
            f"GGUF file {gguf.path}: {len(plan.skipped)} tensor(s) have no Hugging Face counterpart and are skipped: "
            + ", ".join(plan.skipped[:10]),
            stacklevel=4,
        )
    unsupported = {info.name: info for hf in plan.entries for info in plan.infos(hf) if not is_supported(info.type_id)}
    if unsupported:
        shown = ", ".join(f"'{info.name}' ({info.type_name})" for info in list(unsupported.values())[:5])
        raise CheckpointError(
            f"GGUF file {gguf.path} stores tensors in quantisation types microformers-gguf cannot dequantise: "
            f"{shown}{' ...' if len(unsupported) > 5 else ''}. Supported types: {', '.join(SUPPORTED_TYPES)}. "
            "Use a GGUF quantised to one of these (e.g. Q4_K_M, Q8_0) or the safetensors checkpoint."
        )
    return {hf_name: plan.load(hf_name, torch_dtype) for hf_name in plan.entries}


class GGUFFormat:
    """The object registered as checkpoint format ``gguf``."""

    name = "gguf"
    arguments = ("gguf_file",)
    selected_by = ("gguf_file",)  # an explicit gguf_file wins over every format's priority
    expected = "a .gguf file named with gguf_file=..."

    def patterns(self, gguf_file: str | None = None, **_: Any) -> list[str]:
        return [str(gguf_file)] if gguf_file else []

    def find(self, folder: str | os.PathLike[str], gguf_file: str | None = None, **kwargs: Any) -> list[Path] | None:
        """``[folder / gguf_file]`` when ``gguf_file`` is given (it must exist); otherwise not a GGUF load."""
        if not gguf_file:
            return None
        path = Path(gguf_file)
        if not path.is_absolute():
            path = Path(folder) / path
        if not path.is_file():
            raise FileMissingError(
                f"gguf_file '{gguf_file}' was not found in {folder} (looked for {path}); "
                "check the file name, or download the .gguf file into that folder."
            )
        return [path]

    def load(self, files: list[Path], dtype: Any = None, **kwargs: Any) -> dict[str, Any]:
        return load_state_dict(open_gguf(_single(files)), dtype)

    def shapes(self, files: list[Path]) -> dict[str, tuple[int, ...]]:
        """Hugging Face tensor name -> shape, from the tensor table only."""
        plan = TensorPlan(open_gguf(_single(files)))
        return {hf_name: plan.shape(hf_name) for hf_name in plan.entries}

    def load_config(self, files: list[Path]) -> dict[str, Any]:
        """The config dict (a ``ConfigDict`` whose ``source`` is the GGUF file, for error messages)."""
        from microformers.configuration import ConfigDict, check_config_dict

        path = _single(files)
        config = ConfigDict(build_config(open_gguf(path)))
        config.source = str(path)
        check_config_dict(config, path)
        return config

    def load_tokenizer_files(self, files: list[Path]) -> dict[str, Any]:
        from .tokenizer import build_tokenizer_files

        return build_tokenizer_files(open_gguf(_single(files)))


GGUF_FORMAT = GGUFFormat()

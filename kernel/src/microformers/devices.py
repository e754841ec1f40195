"""Checking a requested device before anything is loaded onto it.

torch only notices a missing device when the first tensor moves there, after the weights were read;
these checks run first and say which argument named the device and what to use instead.
"""

from __future__ import annotations

from typing import Any

from .errors import DeviceError

#: ``device_map`` values that pick the device themselves (the first accelerator, else the CPU).
AUTOMATIC_DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device(device: Any, argument: str) -> Any:
    """The ``torch.device`` that ``device`` names, after checking that it exists on this machine.

    ``device`` is a ``torch.device``, a string (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``) or an
    int (a CUDA index; negative means the CPU, as ``pipeline(device=-1)`` does). ``argument`` names
    the setting in the error message (``"device_map"``, ``"--device"``).
    """
    import torch

    if isinstance(device, bool):
        raise DeviceError(f"{argument}={device!r} is not a device; use 'cpu', 'cuda', 'cuda:0' or a CUDA index")
    if isinstance(device, int):
        resolved = torch.device("cpu") if device < 0 else torch.device("cuda", device)
    elif isinstance(device, torch.device):
        resolved = device
    else:
        try:
            resolved = torch.device(device)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise DeviceError(
                f"{argument}={device!r} is not a device ({exc}); use 'cpu', 'cuda', 'cuda:0' or a CUDA index"
            ) from None
    if resolved.type in ("cpu", "meta"):
        return resolved
    available, count = _backend_state(resolved.type)
    if not available:
        hint = (
            " (this torch is a CPU-only build)" if resolved.type == "cuda" and torch.version.cuda is None else ""
        )
        raise DeviceError(
            f"{argument}={device!r}: this machine has no {resolved.type} device{hint}; use {argument}='cpu', "
            f"or run on a machine with a {resolved.type} device and a torch build that supports it"
        )
    if resolved.index is not None and count is not None and resolved.index >= count:
        choices = ", ".join(f"{resolved.type}:{i}" for i in range(count))
        raise DeviceError(
            f"{argument}={device!r}: this machine has {count} {resolved.type} device(s) ({choices}); "
            f"pick one of them, or use {argument}='cpu'"
        )
    return resolved


def check_device_map(device_map: Any, argument: str = "device_map") -> None:
    """Check every device a ``device_map`` (a device, an automatic strategy or a prefix -> device dict) names."""
    if device_map is None or (isinstance(device_map, str) and device_map in AUTOMATIC_DEVICE_MAPS):
        return
    if isinstance(device_map, dict):
        for prefix, device in device_map.items():
            if device != "disk":  # refused by from_pretrained with its own message
                check_device(device, f"{argument}[{prefix!r}]")
        return
    check_device(device_map, argument)


def _backend_state(kind: str) -> tuple[bool, int | None]:
    """Whether torch can use devices of type ``kind`` here, and how many there are (``None``: unknown)."""
    import torch

    if kind == "cuda":
        if not torch.cuda.is_available():
            return False, 0
        return True, torch.cuda.device_count()
    if kind == "mps":
        return bool(torch.backends.mps.is_available()), 1
    backend = getattr(torch, kind, None)
    is_available = getattr(backend, "is_available", None)
    if not callable(is_available):
        return True, None  # a backend torch knows by name only (a privateuse1 device): let torch decide
    if not is_available():
        return False, 0
    device_count = getattr(backend, "device_count", None)
    return True, device_count() if callable(device_count) else None

"""Checking a requested device before anything is loaded onto it: torch notices a missing device only when
the first tensor moves there, after the weights were read; these checks name the argument and the fix."""

from __future__ import annotations

from typing import Any

from .errors import DeviceError

#: ``device_map`` values that pick the devices themselves: ``from_pretrained`` places whole modules on the GPUs,
#: the CPU, then disk within ``max_memory`` (:mod:`microformers.offload`); ``place_modules`` alone (a model already
#: loaded) puts the whole model on the first accelerator, else the CPU.
AUTOMATIC_DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")

#: The most CPU threads a ``--threads`` option takes (chat, serve): more is a typo, not a machine, and asking
#: torch for 100,000 threads crashes the process. (This module only checks the value; the CLI entry points set it.)
MAX_CPU_THREADS = 1024


def thread_count_argument(text: str) -> int:
    """An argparse ``type`` for ``--threads``: an integer from 1 to :data:`MAX_CPU_THREADS`."""
    import argparse
    import os

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text} threads cannot run anything; give 1 or more (or leave --threads out for torch's default)"
        )
    if value > MAX_CPU_THREADS:
        raise argparse.ArgumentTypeError(
            f"{text} threads is more than {MAX_CPU_THREADS:,}; this machine has {os.cpu_count() or 1} CPUs (leave "
            "--threads out for torch's default)"
        )
    return value


def available_memory() -> int | None:
    """Bytes of memory the system has available now (``MemAvailable``), or None where that cannot be read."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_device(device: Any, argument: str) -> Any:
    """The ``torch.device`` that ``device`` names (a ``torch.device``, ``"cuda:1"``, or an int: a CUDA index,
    negative for the CPU as in ``pipeline(device=-1)``), after checking that it exists on this machine."""
    import torch

    usage = "use 'cpu', 'cuda', 'cuda:0' or a CUDA index"
    if isinstance(device, bool):
        raise DeviceError(f"{argument}={device!r} is not a device; {usage}")
    index_device = isinstance(device, int) and (torch.device("cpu") if device < 0 else torch.device("cuda", device))
    try:
        resolved = torch.device(index_device or device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise DeviceError(f"{argument}={device!r} is not a device ({exc}); {usage}") from None
    if resolved.type in ("cpu", "meta"):
        return resolved
    backend = torch.backends.mps if resolved.type == "mps" else getattr(torch, resolved.type, None)
    is_available = getattr(backend, "is_available", None)
    if callable(is_available) and not is_available():
        build = " (this torch is a CPU-only build)" if resolved.type == "cuda" and torch.version.cuda is None else ""
        raise DeviceError(
            f"{argument}={device!r}: this machine has no {resolved.type} device{build}; use {argument}='cpu', "
            f"or run on a machine with a {resolved.type} device and a torch build that supports it"
        )
    device_count = getattr(backend, "device_count", None)
    count = device_count() if callable(device_count) else None
    if resolved.index is not None and count is not None and resolved.index >= count:
        choices = ", ".join(f"{resolved.type}:{i}" for i in range(count))
        raise DeviceError(
            f"{argument}={device!r}: this machine has {count} {resolved.type} device(s) ({choices}); "
            f"pick one of them, or use {argument}='cpu'"
        )
    return resolved


def check_device_map(device_map: Any, argument: str = "device_map") -> None:
    """Check every device a ``device_map`` (a device, an automatic strategy or a prefix -> device dict) names."""
    if isinstance(device_map, dict):
        for prefix, device in device_map.items():
            if device != "disk":  # refused by from_pretrained with its own message
                check_device(device, f"{argument}[{prefix!r}]")
    elif device_map is not None and device_map not in AUTOMATIC_DEVICE_MAPS:
        check_device(device_map, argument)


def device_map_entries(device_map: Any) -> dict[str, Any]:
    """``device_map`` as ``{module prefix: device}``: an automatic strategy is the first accelerator (else the
    CPU), a single device covers the whole model (prefix ``""``), a dict is copied as it is."""
    if isinstance(device_map, str) and device_map in AUTOMATIC_DEVICE_MAPS:
        import torch

        device_map = "cuda:0" if torch.cuda.is_available() else "cpu"
    return dict(device_map) if isinstance(device_map, dict) else {"": device_map}

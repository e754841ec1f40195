"""``microformers plugins`` and ``microformers env``."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable
from typing import Any

from microformers._version import KERNEL_API_VERSION, __version__
from microformers.plugins import iter_plugins, registry


def plugins_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("--json", action="store_true", help="machine-readable output")

    def run(args: argparse.Namespace) -> int:
        plugins = iter_plugins()
        if args.json:
            print(json.dumps([_plugin_dict(p) for p in plugins], indent=2))
            return 0
        for p in plugins:
            status = "BROKEN" if p.broken else "ok"
            print(f"{p.name}  [{status}]  {p.distribution or '?'} {p.version or ''}  ({p.module})")
            if p.broken:
                print(f"    error: {p.error}")
            by_kind: dict[str, list[str]] = {}
            for reg in p.registrations:
                if reg.kind == "architectures":
                    continue
                name = reg.name if isinstance(reg.name, str) else ":".join(reg.name)
                by_kind.setdefault(reg.kind, []).append(name)
            for kind, names in sorted(by_kind.items()):
                print(f"    {kind}: {', '.join(sorted(names))}")
        return 0

    return run


def _plugin_dict(p: Any) -> dict[str, Any]:
    return {
        "name": p.name,
        "distribution": p.distribution,
        "version": p.version,
        "module": p.module,
        "error": p.error,
        "registers": sorted(
            {f"{r.kind}:{r.name if isinstance(r.name, str) else ':'.join(r.name)}" for r in p.registrations}
        ),
    }


def env_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        import importlib.metadata as md

        print(f"microformers {__version__} (kernel API {KERNEL_API_VERSION})")
        print(f"python {sys.version.split()[0]} on {platform.platform()}")
        for dist in ("torch", "tokenizers", "safetensors", "huggingface-hub", "numpy", "gguf", "pluggy"):
            try:
                print(f"{dist} {md.version(dist)}")
            except md.PackageNotFoundError:
                print(f"{dist} not installed")
        import torch

        cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
        print(f"torch build: {torch.__version__}, {cuda}; threads: {torch.get_num_threads()}")
        plugins = iter_plugins()
        print(f"plugins: {len(plugins)} ({sum(p.broken for p in plugins)} broken)")
        for p in plugins:
            state = f"  [BROKEN: {p.error}]" if p.broken else ""
            print(f"  {p.name}: {p.distribution or '?'} {p.version or '?'}{state}")
        for reg in registry.all("environment_reports"):
            try:
                lines = list(reg.load()())
            except Exception as exc:  # one plugin's broken report must not hide the others
                lines = [f"[report failed: {type(exc).__name__}: {exc}]"]
            print(f"{reg.name} ({reg.plugin}):")
            for line in lines:
                print(f"  {line}")
        return 0

    return run

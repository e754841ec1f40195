"""Layering: the kernel imports nothing above it (no SDK, no plugin, no oracle library), checked on its source."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import microformers

SOURCE = Path(microformers.__file__).parent
# Distributions built on the kernel (microformers_sdk, microformers_<plugin>) and the reference libraries
# used only as test oracles: kernel/src imports none of them, at any depth.
ABOVE_THE_KERNEL = re.compile(r"^(microformers_\w+|transformers|peft)(\.|$)")


def _kernel_files() -> list[Path]:
    return sorted(SOURCE.rglob("*.py"))


def _imported_modules(path: Path) -> list[str]:
    """Every module an ``import``/``from`` statement (at any depth) or ``importlib.import_module("...")`` names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "__import__",
        ):
            names += [
                arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            ]
    return names


def test_kernel_imports_no_sdk_or_plugin_package() -> None:
    offending = {
        f"{path.relative_to(SOURCE)}: {name}"
        for path in _kernel_files()
        for name in _imported_modules(path)
        if ABOVE_THE_KERNEL.match(name)
    }
    assert not offending, f"kernel modules import distributions built on the kernel: {sorted(offending)}"


def test_the_layering_pattern_names_what_is_above_the_kernel() -> None:
    above = [
        "microformers_sdk",
        "microformers_sdk.layers",
        "microformers_generation.base",
        "transformers",
        "peft.tuners",
    ]
    below = ["microformers", "microformers.hub", "torch", "safetensors.torch", "transformers_like", "pefty"]
    assert [n for n in above + below if ABOVE_THE_KERNEL.match(n)] == above


def test_the_import_check_sees_lazy_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f():\n    from microformers_sdk.model_helpers import x\n    import importlib\n"
        "    importlib.import_module('microformers_generation.base')\n"
    )
    assert _imported_modules(probe) == ["microformers_sdk.model_helpers", "importlib", "microformers_generation.base"]

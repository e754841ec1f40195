"""The kernel is dispatch and contracts: it imports no SDK or plugin package, and stays within its line budget."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import microformers

SOURCE = Path(microformers.__file__).parent
KERNEL_LINE_BUDGET = 4000  # issue 21: kernel/src at most 4,000 lines of Python


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
            names += [arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    return names


def test_kernel_imports_no_sdk_or_plugin_package() -> None:
    offending = {
        f"{path.relative_to(SOURCE)}: {name}"
        for path in _kernel_files()
        for name in _imported_modules(path)
        if re.match(r"microformers_\w+", name)  # microformers_sdk, microformers_generation, ...
    }
    assert not offending, f"kernel modules import distributions built on the kernel: {sorted(offending)}"


def test_the_import_check_sees_lazy_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from microformers_sdk.model_helpers import x\n    import importlib\n"
                     "    importlib.import_module('microformers_generation.base')\n")
    assert _imported_modules(probe) == ["microformers_sdk.model_helpers", "importlib", "microformers_generation.base"]


def test_kernel_within_line_budget() -> None:
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in _kernel_files())
    assert lines <= KERNEL_LINE_BUDGET, (
        f"kernel/src has {lines} lines of Python, over the budget of {KERNEL_LINE_BUDGET}: move logic that is not "
        "dispatch or contract to the SDK or the plugin that owns it"
    )


def test_declared_methods_dispatch_to_the_registered_implementation(toy_model, monkeypatch) -> None:
    from microformers.plugins import registry

    calls = []
    registry.add("implementations", "PreTrainedModel.resize_token_embeddings", lambda *args: calls.append(args) or 7)
    try:
        assert toy_model.resize_token_embeddings(48, pad_to_multiple_of=16) == 7  # the in-process one wins
        assert calls == [(toy_model, 48, 16, True)]
    finally:
        registry._entries[("implementations", "PreTrainedModel.resize_token_embeddings")].pop()
    # without any implementation: the usual error naming what to install
    monkeypatch.delitem(registry._entries, ("implementations", "PreTrainedModel.resize_token_embeddings"))
    with pytest.raises(microformers.PluginError, match=r"resize_token_embeddings.*pip install microformers-sdk"):
        toy_model.resize_token_embeddings(48)

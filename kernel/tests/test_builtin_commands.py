"""The kernel's built-in CLI commands (``microformers plugins``, ``microformers env``) run in-process."""

from __future__ import annotations

import importlib.metadata as md
import json

import pytest
import torch

import microformers
from microformers.cli import main
from microformers.plugins import iter_plugins

# From test_kernel_small_mutants.py: Small kernel modules (``microformers/__init__.py`` exports, ``lazy``,
# ``outputs``, ``builtin/commands``): behaviour the mutation pass found unasserted (docs/reliability.md).


def _plugins() -> dict:
    return {p.name: p for p in iter_plugins()}


def test_plugins_command_lists_each_plugin_its_state_and_registrations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    toy = _plugins()["toy"]
    assert f"toy  [ok]  {toy.distribution} {toy.version}  ({toy.module})\n" in out
    assert "\n    configs: toy\n" in out and "\n    models: toy:AutoModel, toy:AutoModelForCausalLM\n" in out
    assert "\n    architectures:" not in out  # classes by name are left out
    broken = next(p for p in iter_plugins() if p.broken)
    assert f"{broken.name}  [BROKEN]  " in out and f"\n    error: {broken.error}\n" in out


def test_plugins_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('[\n  {\n    "name": ')  # indented by two
    entries = {entry["name"]: entry for entry in json.loads(out)}
    toy = _plugins()["toy"]
    assert entries["toy"]["version"] == toy.version and entries["toy"]["module"] == toy.module
    assert {"configs:toy", "models:toy:AutoModelForCausalLM"} <= set(entries["toy"]["registers"])
    assert entries["toy"]["distribution"] == toy.distribution and entries["toy"]["error"] is None


def test_env_command_lists_the_dependencies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"torch {md.version('torch')}" in out
    try:
        assert f"gguf {md.version('gguf')}" in out
    except md.PackageNotFoundError:
        assert "gguf not installed" in out


def test_plugins_command_help_describes_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plugins", "--help"])
    assert exit_info.value.code == 0
    assert "--json      machine-readable output" in capsys.readouterr().out


def test_env_command_header_and_every_dependency_line(capsys: pytest.CaptureFixture[str]) -> None:
    import platform

    from microformers._version import KERNEL_API_VERSION

    assert main(["env"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"microformers {microformers.__version__} (kernel API {KERNEL_API_VERSION})"
    assert out[1] == f"python {platform.python_version()} on {platform.platform()}"
    for dist in ("torch", "tokenizers", "safetensors", "huggingface-hub", "numpy", "gguf", "pluggy"):
        try:
            assert f"{dist} {md.version(dist)}" in out
        except md.PackageNotFoundError:
            assert f"{dist} not installed" in out


def test_a_plugin_without_distribution_or_version_is_listed_with_placeholders(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from microformers.builtin import commands

    bare = SimpleNamespace(
        name="bare", broken=False, error=None, distribution=None, version=None, module="bare_mod", registrations=[]
    )
    monkeypatch.setattr(commands, "iter_plugins", lambda: [bare])
    monkeypatch.setattr(commands, "registry", SimpleNamespace(all=lambda kind: []))  # no environment reports
    assert main(["plugins"]) == 0
    assert capsys.readouterr().out == "bare  [ok]  ?   (bare_mod)\n"
    assert main(["env"]) == 0
    assert capsys.readouterr().out.endswith("plugins: 1 (0 broken)\n  bare: ? ?\n")


def test_env_command_missing_dependency_torch_build_and_broken_plugins(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from microformers.builtin import commands

    real_version = md.version

    def version(dist: str) -> str:
        if dist == "gguf":
            raise md.PackageNotFoundError(dist)
        return real_version(dist)

    monkeypatch.setattr(md, "version", version)
    monkeypatch.setattr(torch.version, "cuda", None)
    broken = SimpleNamespace(
        name="bad", broken=True, error="boom", distribution="d", version="1", module="m", registrations=[]
    )
    monkeypatch.setattr(commands, "iter_plugins", lambda: [broken])
    monkeypatch.setattr(commands, "registry", SimpleNamespace(all=lambda kind: []))  # no environment reports
    assert main(["env"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "gguf not installed" in out
    assert f"torch build: {torch.__version__}, CPU-only build; threads: {torch.get_num_threads()}" in out
    assert out[-2:] == ["plugins: 1 (1 broken)", "  bad: d 1  [BROKEN: boom]"]
    monkeypatch.setattr(torch.version, "cuda", "12.1")
    assert main(["env"]) == 0
    assert f"torch build: {torch.__version__}, CUDA 12.1; threads: {torch.get_num_threads()}" in capsys.readouterr().out


def test_env_prints_each_environment_report_and_survives_a_failing_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from microformers.builtin import commands

    def broken() -> list[str]:
        raise RuntimeError("no cpuinfo")

    reports = [
        SimpleNamespace(name="first", plugin="one", load=lambda: broken),
        SimpleNamespace(name="second", plugin="two", load=lambda: lambda: ["kernels: built", "used: yes"]),
    ]
    monkeypatch.setattr(
        commands, "registry", SimpleNamespace(all=lambda kind: reports if kind == "environment_reports" else [])
    )
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert out.endswith(
        "first (one):\n  [report failed: RuntimeError: no cpuinfo]\nsecond (two):\n  kernels: built\n  used: yes\n"
    )


def test_env_reports_the_native_kernels_state(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "native ops (sdk):\n  instruction set: " in out and "\n  microformers_sdk_ops: " in out

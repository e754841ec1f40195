"""Small kernel modules (``microformers/__init__.py`` exports, ``lazy``, ``outputs``, ``builtin/commands``): behaviour
the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import importlib.metadata as md
import json
import pickle
import sys
from pathlib import Path

import pytest
import torch

import microformers
from microformers import MicroformersError
from microformers.cli import main
from microformers.lazy import lazy_exports
from microformers.outputs import ModelOutput
from microformers.plugins import iter_plugins
from microformers_sdk.outputs import CausalLMOutput


def test_setting_an_output_field_to_none_removes_it_and_outputs_pickle() -> None:
    out = CausalLMOutput(logits=torch.ones(1))
    out["loss"] = None  # absent already: nothing to remove
    assert list(out.keys()) == ["logits"]
    out["loss"] = torch.zeros(())
    out["logits"] = None
    assert list(out.keys()) == ["loss"] and out.logits is None
    again = pickle.loads(pickle.dumps(out))
    # exact: a pickle round trip copies bytes
    assert type(again) is CausalLMOutput and list(again.keys()) == ["loss"] and torch.equal(again.loss, out.loss)


def test_an_export_resolves_and_a_known_but_missing_one_names_its_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    assert microformers.__getattr__("LoraConfig").__name__ == "LoraConfig"
    registry = microformers.registry
    get = registry.get
    monkeypatch.setattr(registry, "get", lambda kind, name: None if (kind, name) == ("exports", "Trainer") else get(kind, name))
    with pytest.raises(MicroformersError) as info:
        microformers.__getattr__("Trainer")
    message = str(info.value)
    assert message.startswith("No installed plugin provides name 'Trainer'.")
    assert "pip install microformers-trainer" in message
    with pytest.raises(AttributeError, match=r"^module 'microformers' has no attribute 'NoSuchName'$"):
        microformers.__getattr__("NoSuchName")


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    root = tmp_path / "mf_lazy_probe"
    root.mkdir()
    (root / "__init__.py").write_text("__all__ = ['Thing', 'Other']\n")
    (root / "things.py").write_text("Thing = 'the thing'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mf_lazy_probe"
    for name in [n for n in sys.modules if n.startswith("mf_lazy_probe")]:
        del sys.modules[name]


def test_lazy_exports_import_on_first_use_and_list_all(package: str) -> None:
    import mf_lazy_probe

    getattr_, dir_ = lazy_exports(package, {"Thing": "things"})
    assert getattr_("Thing") == "the thing"
    assert mf_lazy_probe.__dict__["Thing"] == "the thing"  # cached on the package
    assert dir_() == ["Other", "Thing"]  # the package's __all__, not only the lazy names
    with pytest.raises(AttributeError, match=r"^module 'mf_lazy_probe' has no attribute 'Missing'$"):
        getattr_("Missing")


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


# -- third pass (full run of the five modules) ---------------------------------------------------------------------


class _Base(ModelOutput):
    a: int | None
    _hidden: int | None


class _Two(_Base):
    b: int | None
    a: int | None  # declared again: still one field, in its first place


def test_model_output_fields_positions_and_errors() -> None:
    assert _Two._fields == ("a", "b")
    out = _Two(1, 2)
    assert out.a == 1 and out.b == 2 and out.to_tuple() == (1, 2)
    with pytest.raises(TypeError, match=r"^_Two takes at most 2 positional values$"):
        _Two(1, 2, 3)
    with pytest.raises(TypeError, match=r"^_Two got 'a' twice$"):
        _Two(1, a=2)
    extra = _Two(1, c=3, d=None)  # a field a plugin adds is kept; None values are left out
    assert dict(extra) == {"a": 1, "c": 3} and extra.c == 3


def test_set_seed_seeds_python_numpy_and_torch() -> None:
    import random

    import numpy as np

    def draw() -> tuple[float, float, float]:
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    for seed in (3, 2**32 + 5):
        microformers.set_seed(seed)
        first = draw()
        microformers.set_seed(seed)
        assert draw() == first
        microformers.set_seed(seed)
        np_value = float(np.random.rand())
        np.random.seed(seed % 2**32)  # NumPy takes seeds below 2**32
        # exact: the same seed draws the same numbers
        assert float(np.random.rand()) == np_value
    microformers.set_seed(4)
    assert draw() != first


def test_lazy_dir_without_all_lists_the_lazy_names(package: str) -> None:
    import mf_lazy_probe

    del mf_lazy_probe.__all__
    assert lazy_exports(package, {"Thing": "things", "Also": "things"})[1]() == ["Also", "Thing"]


def test_a_missing_output_field_is_named() -> None:
    with pytest.raises(AttributeError, match=r"^'_Two' has no field 'nope'$"):
        _Two(1).nope  # noqa: B018


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
    broken = SimpleNamespace(name="bad", broken=True, error="boom", distribution="d", version="1", module="m", registrations=[])
    monkeypatch.setattr(commands, "iter_plugins", lambda: [broken])
    assert main(["env"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "gguf not installed" in out
    assert f"torch build: {torch.__version__}, CPU-only build; threads: {torch.get_num_threads()}" in out
    assert out[-2:] == ["plugins: 1 (1 broken)", "  bad: d 1  [BROKEN: boom]"]
    monkeypatch.setattr(torch.version, "cuda", "12.1")
    assert main(["env"]) == 0
    assert f"torch build: {torch.__version__}, CUDA 12.1; threads: {torch.get_num_threads()}" in capsys.readouterr().out


def test_a_resolved_export_is_cached_on_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(microformers.__dict__, "LoraConfig", raising=False)
    value = microformers.__getattr__("LoraConfig")
    assert microformers.__dict__["LoraConfig"] is value


def test_dunder_lookups_never_ask_the_plugin_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple] = []
    monkeypatch.setattr(microformers.registry, "get", lambda *args: asked.append(args))
    with pytest.raises(AttributeError, match=r"^module 'microformers' has no attribute '__wrapped__'$"):
        microformers.__getattr__("__wrapped__")  # copy, pickle and inspect probe such names
    assert asked == []

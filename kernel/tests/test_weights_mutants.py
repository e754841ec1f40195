"""Behaviour of ``microformers.weights`` that the mutation pass found unasserted (docs/reliability.md).

The checkpoint-format dispatch is exercised against a private registry holding stand-in formats, so
priorities, ``selected_by`` arguments, refusals and the messages can be checked one by one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from microformers import FileMissingError, PluginError, UnknownModelTypeError
from microformers import weights as weights_module
from microformers.plugins import Registry
from microformers.weights import (
    METADATA_PATTERNS,
    Checkpoint,
    FormatRefused,
    format_arguments,
    formats,
    open_checkpoint,
    resolve_source,
    save_format,
)


class Format:
    """A stand-in checkpoint format: finds ``*.<suffix>`` files."""

    def __init__(self, suffix: str, **attributes: Any) -> None:
        self.suffix = suffix
        self.calls: list[dict[str, Any]] = []
        for key, value in attributes.items():
            setattr(self, key, value)

    def find(self, folder: Path, **kwargs: Any) -> list[Path]:
        self.calls.append(kwargs)
        return sorted(folder.glob(f"*.{self.suffix}"))


class Refusing:
    expected = "refusing files"

    def find(self, folder: Path, **kwargs: Any) -> list[Path]:
        raise FormatRefused(f"{folder.name} holds refused files; pass allow=True.")


@pytest.fixture
def reg(monkeypatch: pytest.MonkeyPatch) -> Registry:
    registry = Registry()
    registry._discovered = True  # only what a test adds
    monkeypatch.setattr(weights_module, "registry", registry)
    return registry


def test_formats_are_ordered_by_priority_and_loaded(reg: Registry) -> None:
    low, high, none = Format("a"), Format("b"), Format("c")
    reg.add("checkpoint_formats", "low", low, priority=1)
    reg.add("checkpoint_formats", "high", high, priority="5")
    reg.add("checkpoint_formats", "none", none)
    reg.add("checkpoint_formats", "negative", Format("d"), priority=-2)
    assert [(r.name, type(f).__name__) for r, f in formats()][:3] == [
        ("high", "Format"),
        ("low", "Format"),
        ("none", "Format"),
    ]
    assert [r.name for r, _ in formats()] == ["high", "low", "none", "negative"]
    assert formats()[0][1] is high


def test_format_arguments_are_the_union(reg: Registry) -> None:
    reg.add("checkpoint_formats", "x", Format("x", arguments=("gguf_file", "other")))
    reg.add("checkpoint_formats", "y", Format("y", arguments=["use_x"]))
    reg.add("checkpoint_formats", "z", Format("z"))
    assert format_arguments() == {"gguf_file", "other", "use_x"}


def test_aliases_resolve_unless_a_path_exists(reg: Registry, tmp_path: Path) -> None:
    target = tmp_path / "real"
    reg.add("model_sources", "my-alias", lambda: (target, {"revision": "a", "dtype": "x"}))
    path, kwargs = resolve_source("my-alias", {"dtype": "mine"})
    assert path == target and kwargs == {"revision": "a", "dtype": "mine"}
    path, kwargs = resolve_source(Path("my-alias"), {})
    assert path == target and kwargs == {"revision": "a", "dtype": "x"}
    assert resolve_source("unknown-alias", {"a": 1}) == ("unknown-alias", {"a": 1})
    existing = tmp_path / "my-alias"
    existing.mkdir()
    reg.add("model_sources", str(existing), lambda: (target, {}))
    assert resolve_source(existing, {}) == (existing, {})
    assert resolve_source(5, {}) == (5, {})


def test_open_checkpoint_splits_arguments_and_honours_selected_by(reg: Registry, tmp_path: Path) -> None:
    plain = Format("safetensors")
    chosen = Format("gguf", arguments=("gguf_file",), selected_by=("gguf_file",))
    flagged = Format("bin", arguments=("use_bin", "bin_opt"), selected_by=("use_bin",))
    reg.add("checkpoint_formats", "plain", plain, priority=10)
    reg.add("checkpoint_formats", "chosen", chosen)
    reg.add("checkpoint_formats", "flagged", flagged)
    ckpt, rest = open_checkpoint(tmp_path, {"gguf_file": "m.gguf", "revision": "main", "dtype": "x"})
    assert rest == {"dtype": "x"} and ckpt.hub_kwargs == {"revision": "main"}
    assert ckpt.format_kwargs == {"gguf_file": "m.gguf"} and ckpt.explicit is True
    assert [fmt for _, fmt in ckpt.candidates] == [chosen]
    assert str(ckpt) == str(tmp_path) and ckpt.source == tmp_path
    # a selecting argument set to None or False selects nothing: every format, by priority
    ckpt, rest = open_checkpoint(tmp_path, {"use_bin": False, "bin_opt": 1, "gguf_file": None})
    assert ckpt.explicit is False and [fmt for _, fmt in ckpt.candidates] == [plain, chosen, flagged]
    assert ckpt.format_kwargs == {"use_bin": False, "bin_opt": 1, "gguf_file": None} and rest == {}
    ckpt2, rest2 = open_checkpoint(ckpt, {"gguf_file": "other.gguf", "dtype": "y"})
    assert ckpt2 is ckpt and rest2 == {"dtype": "y"}
    assert ckpt.format_kwargs == {"use_bin": False, "bin_opt": 1, "gguf_file": None}


def test_open_checkpoint_resolves_an_alias_before_opening(reg: Registry, tmp_path: Path) -> None:
    target = tmp_path / "real"
    reg.add("checkpoint_formats", "plain", Format("safetensors"))
    reg.add("model_sources", "my-alias", lambda: (target, {"revision": "v1", "dtype": "x"}))
    ckpt, rest = open_checkpoint("my-alias", {"dtype": "mine"})
    assert ckpt.source == target and ckpt.hub_kwargs == {"revision": "v1"} and rest == {"dtype": "mine"}


def test_resolve_asks_for_metadata_and_every_candidates_patterns_once(
    reg: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "w.safetensors").write_text("")
    calls: list[tuple[Any, list[str], dict[str, Any]]] = []

    def fake_resolve_folder(source: Any, patterns: list[str], **kwargs: Any) -> Path:
        calls.append((source, patterns, kwargs))
        return tmp_path

    monkeypatch.setattr(weights_module, "resolve_folder", fake_resolve_folder)
    fmt = Format("safetensors", arguments=("variant",), patterns=lambda variant=None: [f"*{variant}.safetensors"])
    reg.add("checkpoint_formats", "st", fmt, priority=1)
    reg.add("checkpoint_formats", "plain", Format("bin"))
    ckpt, _ = open_checkpoint("some/repo", {"variant": "fp16", "revision": "r"})
    folder, found_reg, files = ckpt.resolve()
    assert calls == [("some/repo", [*METADATA_PATTERNS, "*fp16.safetensors"], {"revision": "r"})]
    assert METADATA_PATTERNS == ("*.json", "*.jinja")
    assert folder == tmp_path and found_reg.name == "st" and files == [tmp_path / "w.safetensors"]
    assert fmt.calls == [{"variant": "fp16"}]
    assert ckpt.resolve() == (folder, found_reg, files) and len(calls) == 1 and len(fmt.calls) == 1


def test_carried_asks_the_format_only_when_chosen_or_found(reg: Registry, tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_text("")
    (tmp_path / "w.safetensors").write_text("")
    gguf = Format("gguf", arguments=("gguf_file",), selected_by=("gguf_file",))
    gguf.load_config = lambda files: {"from": [f.name for f in files]}
    plain = Format("safetensors")
    reg.add("checkpoint_formats", "gguf", gguf)
    reg.add("checkpoint_formats", "plain", plain, priority=5)
    explicit, _ = open_checkpoint(tmp_path, {"gguf_file": "m.gguf"})
    assert explicit.carried("config") == {"from": ["m.gguf"]}
    assert explicit.carried("tokenizer_files") is None  # the format carries no tokenizer
    ordinary, _ = open_checkpoint(tmp_path, {})
    assert ordinary.carried("config") is None and ordinary._found is None  # nothing looked up
    ordinary.resolve()
    assert ordinary.carried("config") is None  # found: asked, and the plain format carries nothing
    ordinary._found = (tmp_path, reg.get("checkpoint_formats", "gguf"), [tmp_path / "m.gguf"])
    assert ordinary.carried("config") == {"from": ["m.gguf"]}


def test_find_takes_the_first_format_with_files_and_explains_refusals(reg: Registry, tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_text("")
    reg.add("checkpoint_formats", "st", Format("safetensors", expected="model.safetensors"), priority=3)
    reg.add("checkpoint_formats", "bin", Format("bin"), priority=2)
    ckpt, _ = open_checkpoint(tmp_path, {})
    assert ckpt.resolve()[1].name == "bin"
    (tmp_path / "w.bin").unlink()
    with pytest.raises(FileMissingError) as info:
        open_checkpoint(tmp_path, {})[0].resolve()
    assert str(info.value) == f"no model weights found in {tmp_path}. Expected: model.safetensors; bin."
    reg.add("checkpoint_formats", "refusing", Refusing(), priority=1)
    reg.add("checkpoint_formats", "refusing2", Refusing())
    with pytest.raises(FileMissingError) as info:
        open_checkpoint(tmp_path, {})[0].resolve()
    name = tmp_path.name
    assert str(info.value) == (
        f"no model weights found in {tmp_path}. {name} holds refused files; pass allow=True. "
        f"{name} holds refused files; pass allow=True."
    )
    # refused first, then found by a later format: found wins
    (tmp_path / "w.safetensors").write_text("")
    assert open_checkpoint(tmp_path, {})[0].resolve()[1].name == "st"


def test_find_with_no_formats_at_all(reg: Registry, tmp_path: Path) -> None:
    with pytest.raises(FileMissingError) as info:
        open_checkpoint(tmp_path, {})[0].resolve()
    assert str(info.value) == f"no model weights found in {tmp_path}. Expected: an installed checkpoint format."


def test_save_format_picks_by_safety_then_priority(reg: Registry) -> None:
    class Saving(Format):
        def save(self) -> None: ...

    safe_low = Saving("st", replaces=("*.safetensors", "*.index.json"))
    safe_high = Saving("st2", safe=1)
    pickle = Saving("bin", safe=False, replaces=["*.bin"])
    reader = Format("gguf", replaces=("*.gguf",))  # cannot save
    reg.add("checkpoint_formats", "safe_low", safe_low, priority=1)
    reg.add("checkpoint_formats", "safe_high", safe_high, priority=9)
    reg.add("checkpoint_formats", "pickle", pickle)
    reg.add("checkpoint_formats", "reader", reader, priority=20)
    fmt, replaces = save_format()
    assert fmt is safe_high and replaces == ["*.gguf", "*.safetensors", "*.index.json", "*.bin"]
    assert save_format(safe=True)[0] is safe_high
    assert save_format(safe=False)[0] is pickle
    assert save_format(safe=0)[0] is pickle


def test_save_format_missing_names_the_argument(reg: Registry) -> None:
    reg.add("checkpoint_formats", "reader", Format("gguf"))
    with pytest.raises(UnknownModelTypeError) as info:
        save_format()
    assert (
        str(info.value)
        == "No installed plugin provides checkpoint format that can save 'safetensors'. Installed: reader."
    )
    reg.providers[("checkpoint_formats", "safetensors")] = "microformers-sdk"
    with pytest.raises(PluginError) as info:
        save_format()
    assert str(info.value).startswith(
        "No installed plugin provides checkpoint format that can save 'safetensors'. "
        "Install it with: pip install microformers-sdk"
    )
    reg.providers[("checkpoint_formats", "pytorch_bin")] = "microformers-sdk"
    with pytest.raises(PluginError) as info:
        save_format(safe=False)
    assert str(info.value).startswith(
        "No installed plugin provides checkpoint format that can save without safe_serialization 'pytorch_bin'."
    )


def test_checkpoint_str_is_its_source() -> None:
    assert str(Checkpoint("a/b", {}, {}, [], False)) == "a/b"

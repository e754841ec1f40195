"""``microformers_sdk.scaffold``: behaviour the fourth (full) mutation run found unasserted
(docs/reliability.md, "Fourth pass")."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import tempfile
from pathlib import Path

import pytest

from microformers import ConfigError
from microformers_sdk.scaffold import new_plugin_command, scaffold_plugin


def _shadow_message(name: str, clashes: str, suggestion: str, dist: str) -> str:
    return (
        f"new-plugin: NAME {name!r} would shadow an installed plugin ({clashes}); installing it would replace or "
        f"conflict with that one. Choose another NAME, e.g. {suggestion!r}, or uninstall {dist} first."
    )


def test_an_invalid_name_is_refused_with_the_naming_rule(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        scaffold_plugin("My Arch", tmp_path)
    assert str(info.value) == (
        "new-plugin: NAME 'My Arch' is not a valid plugin name; use lowercase letters and digits, starting with a "
        "letter, optionally joined by '-' or '_' (e.g. 'myarch' or 'my-arch')"
    )


def test_shadowing_names_every_clash_and_suggests_a_free_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        scaffold_plugin("gpt2", tmp_path)
    clashes = (
        f"the distribution microformers-gpt2 {md.version('microformers-gpt2')} is installed; an installed plugin is "
        "named 'gpt2'; model_type 'gpt2' is provided by plugin 'gpt2'"
    )
    assert str(info.value) == _shadow_message("gpt2", clashes, "mygpt2", "microformers-gpt2")
    # a model type served by a plugin of another name (the Llama plugin serves "mistral")
    with pytest.raises(ConfigError) as info:
        scaffold_plugin("mistral", tmp_path)
    clashes = "model_type 'mistral' is provided by plugin 'llama'"
    assert str(info.value) == _shadow_message("mistral", clashes, "mymistral", "microformers-mistral")
    # the suggestion drops the underscore of a two-word name
    with pytest.raises(ConfigError, match=r"e\.g\. 'myqwen2moe', or uninstall microformers-qwen2-moe first\.$"):
        scaffold_plugin("qwen2_moe", tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_default_directory_is_the_current_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert scaffold_plugin("toyarch").resolve() == (tmp_path / "microformers-toyarch").resolve()


def test_missing_parent_folders_are_created(tmp_path: Path) -> None:
    target = scaffold_plugin("toyarch", tmp_path / "a" / "b")
    assert (target / "pyproject.toml").is_file()


def test_an_existing_non_empty_target_is_named_with_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "microformers-toyarch").mkdir()
    (tmp_path / "microformers-toyarch" / "keep.txt").write_text("x")
    with pytest.raises(ConfigError) as info:
        scaffold_plugin("toyarch", tmp_path)
    assert str(info.value) == (
        f"new-plugin: {tmp_path / 'microformers-toyarch'} already exists and is not empty; choose another "
        "--directory or pass --force to replace it"
    )


def test_force_replaces_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "microformers-toyarch").write_text("not a folder")
    target = scaffold_plugin("toyarch", tmp_path, force=True)
    assert (target / "pyproject.toml").is_file()


def test_staging_happens_beside_the_target_not_in_the_system_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unusable = tmp_path / "not-a-folder"
    unusable.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(unusable))  # $TMPDIR unusable: scaffolding still works
    target = scaffold_plugin("toyarch", tmp_path / "out")
    assert (target / "pyproject.toml").is_file()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["microformers-toyarch"]


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[Path] = []
    original = Path.write_text

    def write_text(self: Path, *args: object, **kwargs: object) -> int:
        if written:
            raise OSError(28, "No space left on device")
        written.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    with pytest.raises(OSError, match="No space left"):
        scaffold_plugin("toyarch", tmp_path)
    assert written and list(tmp_path.iterdir()) == []


def _command() -> tuple[argparse.ArgumentParser, object]:
    parser = argparse.ArgumentParser(prog="microformers new-plugin")
    return parser, new_plugin_command(parser)


def test_the_command_writes_into_the_current_folder_by_default_and_prints_next_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    parser, run = _command()
    assert run(parser.parse_args(["toyarch"])) == 0
    target = Path("microformers-toyarch")
    assert (tmp_path / target / "pyproject.toml").is_file()
    assert capsys.readouterr().out == (
        f"created {target}\nnext steps:\n  pip install -e {target}\n  pytest {target / 'tests'}\n"
        "  microformers plugins   # lists 'toyarch'\n"
    )


def test_the_command_takes_a_short_directory_option_and_force(tmp_path: Path) -> None:
    parser, run = _command()
    assert run(parser.parse_args(["toyarch", "-d", str(tmp_path)])) == 0
    (tmp_path / "microformers-toyarch" / "extra.txt").write_text("x")
    with pytest.raises(ConfigError, match="already exists"):
        run(parser.parse_args(["toyarch", "-d", str(tmp_path)]))
    assert run(parser.parse_args(["toyarch", "-d", str(tmp_path), "--force"])) == 0
    assert not (tmp_path / "microformers-toyarch" / "extra.txt").exists()


def test_the_command_help_explains_every_option() -> None:
    parser, _ = _command()
    text = " ".join(parser.format_help().split())
    assert "--directory DIRECTORY, -d DIRECTORY where to create microformers-NAME/ (default: .)" in text
    assert "--force replace an existing non-empty target folder" in text

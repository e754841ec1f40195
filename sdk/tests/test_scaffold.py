"""``microformers new-plugin``: generated distributions install, pass their own tests and are discovered."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from microformers.errors import ConfigError
from microformers_sdk.scaffold import new_plugin_command, plugin_names, scaffold_plugin


def _run(
    args: list[str], cwd: Path | None = None, timeout: int = 600, site: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if site is not None:  # a private site folder in front: the plugin is visible to this process only
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("bad", ["", "My-Arch", "1arch", "my arch", "arch-", "my--arch", "microformers-foo", "a/b"])
def test_invalid_names_are_refused(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="new-plugin"):
        scaffold_plugin(bad, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_names_derive_from_the_argument() -> None:
    names = plugin_names("my-arch")
    assert names["__DIST__"] == "microformers-my-arch"
    assert names["__PACKAGE__"] == "microformers_my_arch"
    assert names["__MODEL_TYPE__"] == "my_arch"
    assert names["__PREFIX__"] == "MyArch"


def test_generated_files(tmp_path: Path) -> None:
    target = scaffold_plugin("toyarch", tmp_path)
    assert target == tmp_path / "microformers-toyarch"
    files = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    assert files == {
        "pyproject.toml",
        "README.md",
        "src/microformers_toyarch/__init__.py",
        "src/microformers_toyarch/plugin.py",
        "src/microformers_toyarch/configuration_toyarch.py",
        "src/microformers_toyarch/modeling_toyarch.py",
        "tests/test_conformance.py",
        "tests/test_plugin.py",
    }
    pyproject = (target / "pyproject.toml").read_text()
    assert 'name = "microformers-toyarch"' in pyproject
    assert 'toyarch = "microformers_toyarch.plugin"' in pyproject
    placeholder = re.compile(r"__[A-Z][A-Z_]*__")
    leftovers = [p for p in target.rglob("*") if p.is_file() and placeholder.search(p.read_text())]
    assert not leftovers, f"unfilled placeholders in {leftovers}"
    assert [p.name for p in tmp_path.iterdir()] == ["microformers-toyarch"], "the staging folder was left behind"


def test_existing_target_needs_force(tmp_path: Path) -> None:
    target = scaffold_plugin("toyarch", tmp_path)
    (target / "mine.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="--force"):
        scaffold_plugin("toyarch", tmp_path)
    assert (target / "mine.txt").read_text() == "keep me"
    scaffold_plugin("toyarch", tmp_path, force=True)
    assert not (target / "mine.txt").exists()
    assert (target / "pyproject.toml").is_file()


def test_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    with pytest.raises(ConfigError, match="--directory"):
        scaffold_plugin("toyarch", not_a_folder)


def test_cli_command_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="microformers new-plugin")
    run = new_plugin_command(parser)
    assert run(parser.parse_args(["toyarch", "--directory", str(tmp_path)])) == 0
    assert (tmp_path / "microformers-toyarch" / "pyproject.toml").is_file()
    assert "pip install -e" in capsys.readouterr().out
    with pytest.raises(ConfigError):
        run(parser.parse_args(["toyarch", "--directory", str(tmp_path)]))


def test_scaffolded_plugin_installs_passes_its_tests_and_is_discovered(tmp_path: Path) -> None:
    """Installed into a throwaway site folder (``pip install --target``), never into the shared environment,
    so parallel test runs cannot see it and nothing has to be uninstalled."""
    name = f"scaffold{uuid.uuid4().hex[:8]}"
    names = plugin_names(name)
    target = scaffold_plugin(name, tmp_path)
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip"]
    install = _run([*pip, "install", "--no-deps", "--no-build-isolation", "-q", "--target", str(site), str(target)])
    assert install.returncode == 0, install.stderr
    assert (site / names["__PACKAGE__"] / "plugin.py").is_file()

    tests = _run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"], cwd=target, site=site)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout

    listing = _run([sys.executable, "-m", "microformers.cli", "plugins", "--json"], site=site)
    assert listing.returncode == 0, listing.stderr
    plugins = {p["name"]: p for p in json.loads(listing.stdout)}
    assert name in plugins, sorted(plugins)
    assert plugins[name]["error"] is None
    assert plugins[name]["distribution"] == names["__DIST__"]
    assert f"configs:{names['__MODEL_TYPE__']}" in plugins[name]["registers"]

    script = textwrap.dedent(
        f"""
        import sys, torch
        from microformers import AutoConfig, AutoModel, AutoModelForCausalLM
        config = AutoConfig.for_model({names["__MODEL_TYPE__"]!r}, vocab_size=40, hidden_size=16,
                                      intermediate_size=24, num_hidden_layers=1, num_attention_heads=2)
        model = AutoModelForCausalLM.from_config(config)
        model.save_pretrained(sys.argv[1])
        loaded = AutoModelForCausalLM.from_pretrained(sys.argv[1])
        ids = torch.tensor([[1, 2, 3]])
        # exact: a save/load round trip copies the weights' bytes; same kernels, same shapes
        assert torch.equal(loaded(ids).logits, model.eval()(ids).logits)
        base = AutoModel.from_pretrained(sys.argv[1])
        print(type(loaded).__name__, type(base).__name__)
        """
    )
    loaded = _run([sys.executable, "-c", script, str(tmp_path / "saved")], site=site)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    prefix = names["__PREFIX__"]
    assert loaded.stdout.split() == [f"{prefix}ForCausalLM", f"{prefix}Model"]

    # the shared environment never saw it
    after = _run([sys.executable, "-m", "microformers.cli", "plugins", "--json"])
    assert name not in {p["name"] for p in json.loads(after.stdout)}
    freeze = _run([*pip, "list", "--format=json"])
    assert names["__DIST__"] not in {d["name"] for d in json.loads(freeze.stdout)}


@pytest.mark.parametrize("name", ["llama", "bert", "gpt2"])
def test_new_plugin_refuses_to_shadow_an_installed_plugin(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=rf"would shadow an installed plugin .*microformers-{name}"):
        scaffold_plugin(name, tmp_path)
    assert not any(tmp_path.iterdir())


# From test_scaffold_mutants.py: ``microformers_sdk.scaffold`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


@pytest.mark.parametrize(("bad", "suggestion"), [("microformers-myarch", "'myarch'"), ("microformers", "'myarch'")])
def test_a_repeated_prefix_is_refused_with_a_suggestion(bad: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as info:
        plugin_names(bad)
    assert str(info.value).endswith(f"pass just the architecture name, e.g. {suggestion}")


def test_the_generated_test_imports_one_per_line(tmp_path: Path) -> None:
    target = scaffold_plugin("toyarch", tmp_path)
    text = next((target / "tests").glob("test_*conformance*.py")).read_text()
    assert "\nfrom microformers_sdk.testing import ModelConformanceTests\n" in text
    assert "\nfrom microformers_toyarch.configuration_toyarch import ToyarchConfig\n" in text


def test_an_existing_empty_folder_is_used(tmp_path: Path) -> None:
    (tmp_path / "microformers-toyarch").mkdir()
    assert scaffold_plugin("toyarch", tmp_path) == tmp_path / "microformers-toyarch"


def test_new_plugin_help() -> None:
    parser = argparse.ArgumentParser(prog="microformers new-plugin")
    new_plugin_command(parser)
    text = " ".join(parser.format_help().split())
    assert text.startswith("usage: microformers new-plugin [-h] [--directory DIRECTORY] [--force] NAME")
    assert "NAME architecture name, e.g. 'myarch' (model_type and package)" in text
    assert "where to create microformers-NAME/ (default: .)" in text


# From test_scaffold_full_mutants.py: ``microformers_sdk.scaffold``: behaviour the fourth (full) mutation run found
# unasserted (docs/reliability.md, "Fourth pass").


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

"""``microformers new-plugin``: generated distributions install, pass their own tests and are discovered."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata as md
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import microformers
from microformers.errors import ConfigError
from microformers_sdk.decoder_heads import DecoderForSequenceClassification
from microformers_sdk.scaffold import new_plugin_command, plugin_names, scaffold_plugin
from microformers_sdk.testing import assert_close, checks


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


def test_scaffolded_plugin_installs_and_is_discovered(tmp_path: Path) -> None:
    """Its own tests run in ``test_scaffolded_plugin_passes_its_own_tests_without_installing``. Installed into a throwaway site folder (``pip install --target``), never into the shared environment,
    so parallel test runs cannot see it and nothing has to be uninstalled."""
    name = f"scaffold{uuid.uuid4().hex[:8]}"
    names = plugin_names(name)
    target = scaffold_plugin(name, tmp_path)
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip"]
    install = _run([*pip, "install", "--no-deps", "--no-build-isolation", "-q", "--target", str(site), str(target)])
    assert install.returncode == 0, install.stderr
    assert (site / names["__PACKAGE__"] / "plugin.py").is_file()

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


# -- the generated plugin in step with the real ones ---------------------------------------------------------
# The scaffold writes what the shipped decoder plugins look like (microformers-llama's eager path): these tests
# generate a plugin into tmp_path, import it by sys.path (nothing installed), run its own tests (the SDK
# conformance kit), and compare its packaging, entry point, SDK building blocks and parameters with the real one.

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "plugins" / "llama"

# The SDK building blocks microformers-llama's eager forward uses, by module; the generated model imports each
# from the same module. Beside them it takes only what the SDK's decoder sequence classifier (which
# LlamaForSequenceClassification runs) uses, because the generated head is written out in its file.
EAGER_BLOCKS = {
    ("microformers_sdk.attention", "eager_attention"),
    ("microformers_sdk.attention", "get_attention_function"),
    ("microformers_sdk.cache", "Cache"),
    ("microformers_sdk.decoder_heads", "keep_logits_positions"),
    ("microformers_sdk.inputs", "prepare_decoder_inputs"),
    ("microformers_sdk.layers", "GatedMLP"),
    ("microformers_sdk.layers", "RMSNorm"),
    ("microformers_sdk.losses", "causal_lm_loss"),
    ("microformers_sdk.masks", "build_attention_mask"),
    ("microformers_sdk.outputs", "BaseModelOutputWithPast"),
    ("microformers_sdk.outputs", "CausalLMOutputWithPast"),
    ("microformers_sdk.rotary", "RotaryEmbedding"),
    ("microformers_sdk.rotary", "apply_rotary_pos_emb"),
    ("microformers_sdk.rotary", "rope_settings_from_config"),
}
SEQUENCE_CLASSIFIER_BLOCKS = {
    ("microformers_sdk.decoder_heads", "pool_last_tokens"),
    ("microformers_sdk.losses", "sequence_classification_loss"),
    ("microformers_sdk.outputs", "SequenceClassifierOutputWithPast"),
}
TINY = {
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 64, "pad_token_id": 0, "num_labels": 3,
}  # fmt: skip


def _sdk_imports(path: Path) -> set[tuple[str, str]]:
    """``(module, name)`` for every ``from microformers_sdk... import name`` at the top of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        (node.module, alias.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("microformers_sdk")
        for alias in node.names
    }


def _hooks(path: Path) -> dict[str, list[str]]:
    """``{hook name: argument names}`` of the ``@hookimpl`` functions in an entry-point module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name: [arg.arg for arg in node.args.args]
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any(getattr(d, "id", None) == "hookimpl" for d in node.decorator_list)
    }


def _api_version(path: Path) -> Any:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "MICROFORMERS_API_VERSION"
        ]:
            return ast.literal_eval(node.value)
    return None


@pytest.fixture
def generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, dict[str, str], ModuleType]]:
    """A plugin generated into tmp_path and imported by sys.path: (its folder, its names, its modeling module)."""
    if not LLAMA.is_dir():
        pytest.skip("needs the repository's plugins/llama to compare with")
    name = f"scaffold{uuid.uuid4().hex[:8]}"
    names = plugin_names(name)
    target = scaffold_plugin(name, tmp_path)
    monkeypatch.syspath_prepend(str(target / "src"))
    modeling = importlib.import_module(f"{names['__PACKAGE__']}.modeling_{names['__MODULE__']}")
    yield target, names, modeling
    for module in [m for m in sys.modules if m == names["__PACKAGE__"] or m.startswith(names["__PACKAGE__"] + ".")]:
        del sys.modules[module]


def test_scaffolded_plugin_passes_its_own_tests_without_installing(
    generated: tuple[Path, dict[str, str], ModuleType],
) -> None:
    """The generated tests (the SDK conformance kit on every head, the registration test), found by PYTHONPATH."""
    target, _, _ = generated
    tests = _run(
        [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"], cwd=target, site=target / "src"
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout and "deselected" not in tests.stdout


def test_the_generated_packaging_and_entry_point_have_the_real_plugins_shape(
    generated: tuple[Path, dict[str, str], ModuleType],
) -> None:
    target, names, _ = generated
    ours = tomllib.loads((target / "pyproject.toml").read_text(encoding="utf-8"))
    real = tomllib.loads((LLAMA / "pyproject.toml").read_text(encoding="utf-8"))
    assert ours["build-system"] == real["build-system"]
    assert ours["tool"]["setuptools"] == real["tool"]["setuptools"]
    assert set(real["project"]) - {"optional-dependencies"} <= set(ours["project"])
    assert ours["project"]["dependencies"] == real["project"]["dependencies"]
    assert ours["project"]["requires-python"] == real["project"]["requires-python"]
    # one entry point in the "microformers" group, named after the plugin, pointing at PACKAGE.plugin
    assert list(ours["project"]["entry-points"]) == list(real["project"]["entry-points"]) == ["microformers"]
    assert ours["project"]["entry-points"]["microformers"] == {names["__NAME__"]: f"{names['__PACKAGE__']}.plugin"}
    assert real["project"]["entry-points"]["microformers"] == {"llama": "microformers_llama.plugin"}

    ours_plugin = target / "src" / names["__PACKAGE__"] / "plugin.py"
    real_plugin = LLAMA / "src" / "microformers_llama" / "plugin.py"
    assert _api_version(ours_plugin) == _api_version(real_plugin) == microformers.KERNEL_API_VERSION
    assert _hooks(ours_plugin) == {"register_models": ["register"]}
    assert _hooks(ours_plugin).items() <= _hooks(real_plugin).items()

    plugin = importlib.import_module(f"{names['__PACKAGE__']}.plugin")
    real_module = importlib.import_module("microformers_llama.plugin")
    ours_calls: list[tuple[Any, ...]] = []
    real_calls: list[tuple[Any, ...]] = []
    plugin.register_models(register=lambda *args: ours_calls.append(args))
    real_module.register_models(register=lambda *args: real_calls.append(args))
    (model_type, config_ref, models), real_llama = ours_calls[0], real_calls[0]
    assert len(ours_calls) == 1 and real_llama[0] == "llama"
    assert (type(model_type), type(config_ref), type(models)) == tuple(type(part) for part in real_llama)
    assert set(models) == set(real_llama[2])  # the same Auto classes: base model, causal LM, sequence classifier
    assert all(re.fullmatch(r"[\w.]+:\w+", ref) for ref in (config_ref, *models.values()))


def test_the_generated_model_uses_the_real_decoders_sdk_building_blocks(
    generated: tuple[Path, dict[str, str], ModuleType],
) -> None:
    target, names, _ = generated
    ours = _sdk_imports(target / "src" / names["__PACKAGE__"] / f"modeling_{names['__MODULE__']}.py")
    real = _sdk_imports(LLAMA / "src" / "microformers_llama" / "modeling_llama.py")
    assert EAGER_BLOCKS <= real, f"microformers-llama no longer imports {sorted(EAGER_BLOCKS - real)}: update both"
    runs = inspect.getsource(DecoderForSequenceClassification.forward)  # LlamaForSequenceClassification's forward
    assert all(f"{name}(" in runs for _, name in SEQUENCE_CLASSIFIER_BLOCKS)
    assert ours == EAGER_BLOCKS | SEQUENCE_CLASSIFIER_BLOCKS
    config = (target / "src" / names["__PACKAGE__"] / f"configuration_{names['__MODULE__']}.py").read_text()
    assert "import torch" not in config  # AutoConfig stays cheap, as the real configs


def test_the_generated_model_reads_top_to_bottom_and_matches_llama_with_the_same_weights(
    generated: tuple[Path, dict[str, str], ModuleType],
) -> None:
    """Classes in reading order, projections named in the file, Llama's parameter names; Llama's weights loaded
    into it give Llama's outputs (the scaffold is the Llama eager path, written out)."""
    llama = pytest.importorskip("microformers_llama.modeling_llama")
    from microformers_llama.configuration_llama import LlamaConfig

    _, names, modeling = generated
    prefix = names["__PREFIX__"]
    order = ["Attention", "DecoderLayer", "PreTrainedModel", "Model", "ForCausalLM", "ForSequenceClassification"]
    source = inspect.getsource(modeling)
    positions = [source.index(f"class {prefix}{part}(") for part in order]
    assert positions == sorted(positions)
    assert f"class {prefix}Attention(nn.Module)" in source and "self.q_proj = nn.Linear(" in source
    assert "self.o_proj = nn.Linear(" in source and "self.mlp = GatedMLP(" in source

    ids = torch.tensor([[0, 0, 5, 9, 3, 7], [4, 8, 2, 6, 1, 9]])
    mask = (ids != 0).long()
    for head in ("ForCausalLM", "ForSequenceClassification"):
        torch.manual_seed(0)
        reference = checks.build_model(getattr(llama, f"Llama{head}"), LlamaConfig(**TINY)).eval()
        config_class = getattr(importlib.import_module(modeling.__name__.replace(".modeling_", ".configuration_")),
                               f"{prefix}Config")  # fmt: skip
        ours = getattr(modeling, f"{prefix}{head}")(config_class(**TINY)).eval()
        assert list(ours.state_dict()) == list(reference.state_dict())
        assert [name for name, _ in ours.named_modules()] == [name for name, _ in reference.named_modules()]
        ours.load_state_dict(reference.state_dict())
        with torch.no_grad():
            expected = reference(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
            got = ours(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
            plain_expected, plain_got = reference(ids, attention_mask=mask), ours(ids, attention_mask=mask)
        assert_close(got.logits, expected.logits)
        assert_close(plain_got.logits, plain_expected.logits)
        for mine, theirs in zip(
            got.hidden_states + got.attentions, expected.hidden_states + expected.attentions, strict=True
        ):
            assert_close(mine, theirs)

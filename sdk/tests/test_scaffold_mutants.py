"""``microformers_sdk.scaffold`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from microformers import ConfigError
from microformers_sdk.scaffold import new_plugin_command, plugin_names, scaffold_plugin


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

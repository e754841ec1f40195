"""``microformers --version`` and ``microformers env`` (issue 18 item 8)."""

from __future__ import annotations

import importlib.metadata as md

import pytest
import torch

from microformers import __version__
from microformers.cli import main
from microformers.plugins import iter_plugins


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert (
        capsys.readouterr().out.strip() == f"microformers {__version__}" == f"microformers {md.version('microformers')}"
    )


def test_env_lists_plugins_versions_and_torch_build(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert f"torch build: {torch.__version__}" in out
    assert f"threads: {torch.get_num_threads()}" in out
    for plugin in iter_plugins():
        assert f"  {plugin.name}: {plugin.distribution} {plugin.version}" in out

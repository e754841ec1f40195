"""`import microformers` stays cheap, and the CLI lists plugins (including broken ones) without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


def test_import_does_not_pull_torch_or_plugins():
    out = run_python(
        "import sys, microformers; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch','tokenizers','transformers','safetensors','huggingface_hub','numpy') "
        "or m.startswith('microformers_')))"
    )
    assert out.stdout.strip() == "[]"


def test_importtime_shows_no_torch():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import microformers"], capture_output=True, text=True, check=True
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "microformers" in imported
    assert not any(name == "torch" or name.startswith("torch.") for name in imported)


def test_cli_plugins_lists_test_plugins_and_broken_one():
    proc = subprocess.run(
        [sys.executable, "-m", "microformers.cli", "plugins"], capture_output=True, text=True, check=True
    )
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "toy  [ok]" in proc.stdout
    assert "broken-import  [BROKEN]" in proc.stdout
    assert "microformers_dependency_that_is_not_installed" in proc.stdout
    assert "kernel API 99" in proc.stdout


def test_cli_plugins_json_and_plugin_command():
    proc = subprocess.run(
        [sys.executable, "-m", "microformers.cli", "plugins", "--json"], capture_output=True, text=True, check=True
    )
    plugins = {p["name"]: p for p in json.loads(proc.stdout)}
    assert "configs:toy" in plugins["toy"]["registers"]
    assert plugins["broken-import"]["error"].startswith("ModuleNotFoundError")
    hello = subprocess.run(
        [sys.executable, "-m", "microformers.cli", "toy-hello", "world"], capture_output=True, text=True, check=True
    )
    assert hello.stdout.strip() == "hello world"


def test_cli_env():
    proc = subprocess.run([sys.executable, "-m", "microformers.cli", "env"], capture_output=True, text=True, check=True)
    assert "kernel API 1" in proc.stdout
    assert "torch" in proc.stdout


NO_TORCH_PROBE = """
import sys
from microformers.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print('TORCH-LOADED' if 'torch' in sys.modules else 'no-torch', file=sys.stderr)
"""


def test_discovery_help_and_plugins_import_no_torch():
    """Discovery imports every installed entry module; none may pull torch (the CLI must start fast).

    The test-only plugins (``.test-plugins``, whose toy command lives beside its torch model) are left out.
    """
    import os

    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if ".test-plugins" not in p)}
    for argv in (["--help"], ["plugins"], []):
        proc = subprocess.run([sys.executable, "-c", NO_TORCH_PROBE, *argv], capture_output=True, text=True, env=env)
        assert proc.stderr.strip().splitlines()[-1] == "no-torch", (argv, proc.stderr[-2000:])
    plugins_seen = run_python("import microformers; print(len(microformers.plugins.iter_plugins()))")
    assert int(plugins_seen.stdout) >= 5  # the probe really discovered the installed plugins


def test_misspelled_hook_is_named_with_the_right_one():
    import types

    import pytest

    from microformers import PluginError, hookimpl
    from microformers.plugins import check_plugin_module

    module = types.ModuleType("typo_plugin")
    module.MICROFORMERS_API_VERSION = 1
    module.register_model = hookimpl(lambda register: None)
    with pytest.raises(
        PluginError, match=r"typo_plugin\.register_model is not a microformers hook; did you mean 'register_models'"
    ):
        check_plugin_module(module)
    del module.register_model
    module.register_models = lambda register: None  # right name, but pluggy would silently ignore it
    with pytest.raises(PluginError, match="is not marked @microformers.hookimpl"):
        check_plugin_module(module)
    module.register_models = hookimpl(lambda register: None)
    check_plugin_module(module)

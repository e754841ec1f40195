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

"""Drive the CLI like a user: a scripted conversation with the embedded SmolLM2 model."""

from __future__ import annotations

import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "microformers.cli"]


@pytest.mark.slow
def test_scripted_chat_answers_paris_and_handles_commands():
    script = "What is the capital of France?\n/reset\nWhat is the capital of Germany? Answer in one word.\n/exit\nnever read\n"
    proc = subprocess.run(
        [*CLI, "chat", "--max-new-tokens", "24"], input=script, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    first, _, rest = out.partition("(conversation reset)")
    assert "Paris" in first
    assert "Berlin" in rest
    assert "never read" not in out


@pytest.mark.slow
def test_generate_one_shot():
    proc = subprocess.run(
        [*CLI, "generate", "What is the capital of France?", "--max-new-tokens", "20"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout


def test_generate_bad_model_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [*CLI, "generate", str(tmp_path / "missing-model"), "hello"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "microformers generate: error:" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr

"""``microformers serve`` on the command line: bad arguments are clear errors, not tracebacks."""

from __future__ import annotations

import subprocess
import sys

CLI = [sys.executable, "-m", "microformers.cli", "serve"]


def test_missing_model_is_a_clear_error(tmp_path):
    proc = subprocess.run([*CLI, str(tmp_path / "missing")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "microformers serve: error:" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_flags_are_refused():
    proc = subprocess.run([*CLI, "--max-batch-size", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--max-batch-size" in proc.stderr and "must be >= 1" in proc.stderr

"""The torchrun runner the distributed tests share: a rank killed by a signal is retried once and then reported
with every rank's output and Python stacks; a Python error in a rank is reported at once, never retried."""

from __future__ import annotations

from pathlib import Path

import pytest

from microformers_sdk.testing.distributed import run_torchrun

WORKER = """
import os, sys
from pathlib import Path
import torch.distributed as dist
from microformers_sdk.testing.distributed import finish_distributed_script, start_rank_diagnostics

output, mode = Path(sys.argv[1]), sys.argv[2]
start_rank_diagnostics(output)
dist.init_process_group("gloo")
with open(output.parent / f"runs_rank{dist.get_rank()}", "a") as runs:  # beside output: kept by a retry
    runs.write("x")
dist.barrier()
if dist.get_rank() == 1:
    print(f"rank one reached the fault ({mode})", file=sys.stderr, flush=True)
    if mode == "abort":
        os.abort()
    raise ValueError("a check in rank one failed")
finish_distributed_script()
"""


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return script


def test_a_rank_killed_by_a_signal_is_retried_once_and_reported_with_its_stack(worker, tmp_path):
    with pytest.raises(AssertionError) as failure:
        run_torchrun(worker, tmp_path / "out", "abort")
    message = str(failure.value)
    assert (tmp_path / "runs_rank1").read_text() == "xx"  # two runs from scratch, no third
    assert message.count("=== next run ===") == 1
    assert "rank one reached the fault (abort)" in message
    assert "--- fatal_rank1.log:" in message and "Fatal Python error: Aborted" in message


def test_a_python_error_in_a_rank_is_reported_without_a_retry(worker, tmp_path):
    with pytest.raises(AssertionError) as failure:
        run_torchrun(worker, tmp_path / "out", "raise")
    assert (tmp_path / "runs_rank1").read_text() == "x"
    assert "ValueError: a check in rank one failed" in str(failure.value)
    assert "=== next run ===" not in str(failure.value)

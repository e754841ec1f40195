"""Running a test's script on several CPU processes (torchrun or accelerate, gloo), and the two calls such a
script makes: :func:`start_rank_diagnostics` first, :func:`finish_distributed_script` last.

Gloo's native threads abort a rank now and then (SIGABRT, "terminate called without an active exception",
or a read on a connection its peer's crash reset) on machines where the same job passes hundreds of times
elsewhere. A run whose worker died of a signal is started once more from scratch; a second failure fails
the test with both runs' output and every rank's Python stacks at the signal. A Python error or a failed
check in a worker is never retried.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["finish_distributed_script", "run_accelerate_launch", "run_torchrun", "start_rank_diagnostics"]

# exit codes torchrun's summary gives a worker killed by SIGABRT, SIGBUS, SIGSEGV
_FATAL_SIGNALS = (6, 7, 11)


def start_rank_diagnostics(output_dir: str | os.PathLike[str]) -> None:
    """In a worker: a fatal signal writes every Python thread's stack to ``<output_dir>/fatal_rank<N>.log``,
    so a native crash says where the rank was."""
    import faulthandler

    Path(output_dir).mkdir(parents=True, exist_ok=True)
    log = open(Path(output_dir) / f"fatal_rank{os.environ.get('RANK', '0')}.log", "w")  # open until the process exits
    faulthandler.enable(file=log, all_threads=True)


def finish_distributed_script() -> None:
    """End a worker once its results are written: destroy the process group, flush, and leave without
    interpreter finalisation, where gloo's native threads are torn down and a rare race aborts the process
    after all work is done."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_torchrun(
    script: str | os.PathLike[str], output_dir: str | os.PathLike[str], *args: str, processes: int = 2
) -> None:
    """``torchrun --standalone --nproc_per_node <processes> <script> <output_dir> <args>``, one thread a
    process; asserts it succeeded (retrying once a run a signal killed, as the module says)."""
    launcher = ["--standalone", "--nproc_per_node", str(processes)]
    _run_launcher([_venv_command("torchrun"), *launcher, str(script), str(output_dir), *args], output_dir)


def run_accelerate_launch(
    script: str | os.PathLike[str], output_dir: str | os.PathLike[str], *args: str, processes: int = 2
) -> None:
    """``accelerate launch --multi_gpu --num_processes <processes> <script> <output_dir> <args>`` on a free port,
    one thread a process, checked and retried as :func:`run_torchrun`.

    ``--multi_gpu`` is accelerate's torch.distributed launcher (what it runs for every multi-process launch on one
    machine); the script's ``Accelerator(cpu=True)`` keeps it on CPU with gloo. ``--cpu --num_processes N`` would
    not start N processes: accelerate starts several CPU processes only through ``mpirun`` (``--mpirun_hostfile``)."""
    launcher = ["launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1"]
    launcher += ["--main_process_port", "0", "--mixed_precision", "no", "--dynamo_backend", "no"]
    _run_launcher([_venv_command("accelerate"), *launcher, str(script), str(output_dir), *args], output_dir)


def _venv_command(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is not installed beside {sys.executable}"
    return found


def _run_launcher(cmd: list[str], output_dir: str | os.PathLike[str]) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    reports = []
    for _attempt in range(2):
        shutil.rmtree(output_dir, ignore_errors=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode == 0:
            return
        stacks = "\n".join(
            f"--- {log.name}:\n{log.read_text()[-2000:]}" for log in sorted(Path(output_dir).glob("fatal_rank*.log"))
        )
        reports.append(f"{_worker_output(proc.stderr)}\n{stacks}")
        if not any(f"exitcode  : -{signal}" in proc.stderr for signal in _FATAL_SIGNALS):
            break
    raise AssertionError("\n=== next run ===\n".join(reports))


def _worker_output(stderr: str, lines_per_rank: int = 40, other_lines: int = 80) -> str:
    """The last lines of each rank's Python errors (torch prefixes them ``[rankN]:``), then the last of the rest:
    what the ranks printed unprefixed (a native abort's message among them) and the launcher's summary."""
    by_rank: dict[str, list[str]] = {}
    other: list[str] = []
    for line in stderr.splitlines():
        prefix, _, _ = line.partition("]:")
        if line.startswith("[rank") and prefix[5:].isdigit():
            by_rank.setdefault(prefix + "]", []).append(line)
        else:
            other.append(line)
    parts = ["\n".join(lines[-lines_per_rank:]) for _, lines in sorted(by_rank.items())]
    return "\n".join([*parts, "--- other output:", *other[-other_lines:]])

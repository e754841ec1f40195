"""accelerate with our models: the documentation's ``Accelerator().prepare(...)`` loop in one process and under
``accelerate launch`` with 2 CPU processes (gloo; ending with the weights of one process with the whole batch); and the
Trainer, which never uses accelerate, trains the same with accelerate hidden from imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate_script import ROWS, main, trainer_run
from safetensors.torch import load_file
from trainer_helpers import tiny_llama

import microformers
from microformers_sdk.testing.distributed import run_accelerate_launch

pytest.importorskip("accelerate")
SCRIPT = Path(__file__).parent / "accelerate_script.py"


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture
def fresh_accelerator_state() -> Any:
    """accelerate keeps its process state in singletons: each test starts and ends without one."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_the_documented_accelerator_loop_trains_our_model_in_one_process(
    tmp_path: Path, fresh_accelerator_state: Any
) -> None:
    trained = main(str(tmp_path), 4)
    initial = tiny_llama().state_dict()
    assert max_difference(trained, initial) > 1e-3, "the loop did not move the weights"
    seen = json.loads((tmp_path / "rank0.json").read_text())
    assert seen["num_processes"] == 1 and seen["rows"] == [4] * (2 * ROWS // 4)
    # accelerator.unwrap_model gives our model back: it saves a normal folder that loads with its own class
    loaded = microformers.AutoModelForCausalLM.from_pretrained(tmp_path / "accelerate")
    assert type(loaded).__name__ == "LlamaForCausalLM"
    assert max_difference(loaded.state_dict(), trained) == 0.0  # the same tensors written and read back


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch build has no torch.distributed")
def test_accelerate_launch_with_two_cpu_processes_matches_one_process_with_the_whole_batch(
    tmp_path: Path, fresh_accelerator_state: Any
) -> None:
    out = tmp_path / "launched"
    run_accelerate_launch(SCRIPT, out, "2")
    for rank in (0, 1):  # two gloo processes, each with half of every batch of four
        seen = json.loads((out / f"rank{rank}.json").read_text())
        assert seen["num_processes"] == 2 and seen["backend"] == "gloo", seen
        assert seen["rows"] == [2] * (2 * ROWS // 4)
    single = main(str(tmp_path / "single"), 4)
    ours = load_file(out / "accelerate" / "model.safetensors")
    worst = max_difference(ours, {k: single[k] for k in ours})
    assert worst <= 1e-5, f"2 processes x batch 2 end {worst:.3g} away from 1 process x batch 4"
    assert max_difference(ours, {k: tiny_llama().state_dict()[k] for k in ours}) > 1e-3


def test_the_trainer_trains_the_same_with_accelerate_hidden(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(hidden), "--trainer-without-accelerate"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((hidden / "accelerate_modules.json").read_text())
    assert report == {"loaded": [], "attempts": []}  # never imported, not even tried

    torch.set_num_threads(1)
    visible = trainer_run(str(tmp_path / "visible"))
    theirs = load_file(hidden / "model.safetensors")
    ours = {k: v.detach() for k, v in visible.model.state_dict().items() if k in theirs}
    # the same computation in two processes: the same numbers up to thread-count summation order
    assert max_difference(ours, theirs) <= 1e-6
    losses = json.loads((hidden / "losses.json").read_text())
    assert len(losses) == 4
    ours_losses = [e["loss"] for e in visible.state.log_history if "loss" in e]
    assert max(abs(a - b) for a, b in zip(ours_losses, losses)) <= 1e-6

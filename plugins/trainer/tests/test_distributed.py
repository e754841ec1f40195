"""torchrun --nproc_per_node 2 on CPU (gloo, DDP): 2 processes x batch 4 end where 1 process x batch 8 does;
with dropout, a run stopped after a checkpoint and resumed ends bit-identical to an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from ddp_script import main
from safetensors.torch import load_file
from trainer_helpers import tiny_gpt2

from microformers_sdk.testing.distributed import run_torchrun

SCRIPT = Path(__file__).parent / "ddp_script.py"


def ddp_script_initial() -> dict[str, torch.Tensor]:
    return tiny_gpt2(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0).state_dict()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch build has no torch.distributed")
def test_two_processes_match_one_process_with_the_whole_batch(tmp_path: Path) -> None:
    ddp = tmp_path / "ddp"
    run_torchrun(SCRIPT, ddp, "4", "dropout")

    single = main(str(tmp_path / "single"), 8)
    ours = load_file(ddp / "final" / "model.safetensors")
    theirs = {k: v for k, v in single.model.state_dict().items() if k in ours}
    assert len(theirs) == len(ours)
    worst = max(float((ours[k] - theirs[k]).abs().max()) for k in ours)
    assert worst <= 1e-6, f"DDP weights differ from the single-process run by {worst:.3g}"
    initial = ddp_script_initial()
    assert max(float((ours[k] - initial[k]).abs().max()) for k in ours) > 1e-3, "training did not move the weights"

    logged = [json.loads(x) for x in (ddp / "training_log.jsonl").read_text().splitlines()]
    single_logged = [json.loads(x) for x in (tmp_path / "single" / "training_log.jsonl").read_text().splitlines()]
    steps = [x for x in logged if "loss" in x]
    assert [x["step"] for x in steps] == [1, 2, 3, 4]  # written once: only rank 0 logs
    for a, b in zip(steps, (x for x in single_logged if "loss" in x)):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["learning_rate"] == b["learning_rate"]  # exact: the same schedule arithmetic in Python floats

    # dropout, a different generator stream per rank: each rank saves and restores its own (rng_state_<rank>.pth)
    checkpoint = ddp / "dropout-stopped" / "checkpoint-3"
    assert not (checkpoint / "rng_state.pth").exists()
    states = [torch.load(checkpoint / f"rng_state_{rank}.pth", weights_only=True) for rank in (0, 1)]
    assert not torch.equal(states[0]["cpu"], states[1]["cpu"]), "the ranks' generators should differ"
    full = load_file(ddp / "dropout-full" / "final" / "model.safetensors")
    resumed = load_file(ddp / "dropout-resumed" / "model.safetensors")
    assert full.keys() == resumed.keys()
    # exact: both runs are the same DDP script on one thread a rank, the resumed one from the checkpoint's bytes
    assert all(torch.equal(full[k], resumed[k]) for k in full), "the resumed DDP run differs from the uninterrupted one"
    stopped = load_file(checkpoint / "model.safetensors")
    assert any(not torch.equal(full[k], stopped[k]) for k in full), "the resumed run did not train after the checkpoint"

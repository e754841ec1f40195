"""Run by test_tensor_parallel.py under ``torchrun --nproc_per_node 2``: ``tp_worker.py OUTPUT_DIR FOLDER...``.

Each folder is loaded with ``tp_plan="auto"``; rank 0 writes, per folder, the logits of one forward pass, the
greedy tokens and scores of ``generate``, and how one sharded weight looked on each rank. Then bad requests
are tried and their errors written, for the test to check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import microformers
from microformers.errors import ConfigError
from microformers_sdk.testing.distributed import finish_distributed_script, start_rank_diagnostics

output, folders = Path(sys.argv[1]), sys.argv[2:]
start_rank_diagnostics(output)
torch.manual_seed(0)
results: dict[str, dict] = {}
ids = torch.tensor([[3, 17, 5, 42, 8, 1], [9, 2, 30, 11, 6, 7]])

for folder in folders:
    name = Path(folder).name
    if name.startswith("bad_"):
        continue
    model = microformers.AutoModelForCausalLM.from_pretrained(folder, tp_plan="auto")  # starts the process group
    rank = dist.get_rank()
    attention = model.model.layers[0].self_attn
    weights = {
        "q_proj": (attention.q_proj.weight.to_local().clone(), tuple(attention.q_proj.weight.shape)),
        "o_proj": (attention.o_proj.weight.to_local().clone(), tuple(attention.o_proj.weight.shape)),
        "embed": (model.model.embed_tokens.weight.detach().clone(), None),
    }
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        generated = model.generate(
            input_ids=ids,
            max_new_tokens=8,
            do_sample=False,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
        cached_keys = model(input_ids=ids, use_cache=True).past_key_values[0][0]
    model.save_pretrained(output / f"saved_{name}")  # every rank gathers; rank 0 writes
    per_rank = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, {k: v[0] for k, v in weights.items()})
    if rank == 0:
        results[name] = {
            "logits": logits,
            "sequences": generated.sequences,
            "scores": generated.scores,
            "weights": per_rank,
            "global_shapes": {k: v[1] for k, v in weights.items()},
            "tp_size": model._tp_size,
            "cached_key_shape": tuple(cached_keys.shape),
        }
        torch.save(results, output / "results.pt")

errors: dict[str, str] = {}


def refused(label: str, folder: str, **kwargs) -> None:
    try:
        microformers.AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except ConfigError as exc:
        errors[label] = str(exc)
    else:
        errors[label] = "accepted"


by_name = {Path(f).name: f for f in folders}
# tp_size below the world size (one copy per rank here) and a caller's 1-D mesh
for label, kwargs in (("tp_size_1", {"tp_size": 1}), ("device_mesh", {"device_mesh": init_device_mesh("cpu", (2,))})):
    model = microformers.AutoModelForCausalLM.from_pretrained(folders[0], tp_plan="auto", **kwargs)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    if dist.get_rank() == 0:
        results[label] = {"logits": logits, "tp_size": model._tp_size, "model": Path(folders[0]).name}
        torch.save(results, output / "results.pt")

refused("tp_size_not_dividing", folders[0], tp_plan="auto", tp_size=3)
refused("unknown_style", folders[0], tp_plan={"model.layers.*.mlp.up_proj": "diagonal"})
refused("heads_not_divisible", by_name["bad_three_heads"], tp_plan="auto")
refused("no_plan", by_name["bad_no_plan"], tp_plan="auto")
refused("not_strict", folders[0], tp_plan="auto", strict=False)
if dist.get_rank() == 0:
    (output / "errors.json").write_text(json.dumps(errors))
dist.barrier()
finish_distributed_script()

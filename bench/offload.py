"""Big-model loading with disk offload (issue 37 item 6): SmolLM2-135M loaded whole, and with ``device_map="auto"``,
``max_memory={"cpu": 40% of its weights}`` and an ``offload_folder``, one fresh process each.

    .venv/bin/python bench/offload.py [--model smollm2|random] [--fraction 0.4] [--new-tokens 16] [--threads 2]

Prints for each load: the peak resident memory of the process (``VmHWM``) over its runtime (the RSS after
torch, the kernel, the plugins and the tokenizer were loaded and a tiny model ran a generate), against the
limit;
``hf_device_map``'s count of layers on the CPU and on disk; the greedy tokens of one prompt (equal or not);
the load time and the seconds per generated token of a greedy batch-1 generate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

CHILD = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
import _common as common
common.set_threads()
import torch
import microformers

tiny = microformers.AutoConfig.for_model("llama", vocab_size=64, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
microformers.AutoModelForCausalLM.from_config(tiny).generate(torch.tensor([[1, 2]]), max_new_tokens=2)
ids, mask = common.prompts(__import__("pathlib").Path({folder!r}), 1, 24)  # the tokenizer: part of the runtime
runtime = common.current_rss_mb()
limit, offload = {limit!r}, {offload!r}
kwargs = dict(device_map="auto", max_memory={{"cpu": limit}}, offload_folder=offload) if limit else {{}}
start = time.perf_counter()
model = microformers.AutoModelForCausalLM.from_pretrained({folder!r}, dtype=torch.float32, **kwargs)
load = time.perf_counter() - start
new = {new_tokens!r}
with torch.inference_mode():
    start = time.perf_counter()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=2)
    seconds = time.perf_counter() - start
places = list(getattr(model, "hf_device_map", {{"": "cpu"}}).items())
print("RESULT " + json.dumps(dict(
    runtime=runtime, peak=common.peak_rss_mb(), load=load, per_token=seconds / new, tokens=out[0].tolist(),
    cpu_layers=sum(1 for k, v in places if ".layers." in k and v == "cpu"),
    disk_layers=sum(1 for k, v in places if ".layers." in k and v == "disk"),
)))
"""


def run(folder: Path, limit: int, offload: str, new_tokens: int) -> dict:
    code = CHILD.format(
        bench=str(Path(__file__).resolve().parent), folder=str(folder), limit=limit, offload=offload,
        new_tokens=new_tokens,
    )  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--fraction", type=float, default=0.4, help="max_memory['cpu'] as a fraction of the weights")
    parser.add_argument("--new-tokens", type=int, default=16)
    args = parser.parse_args()
    folder = common.model_folder(args.model)
    size = (folder / "model.safetensors").stat().st_size
    limit = int(size * args.fraction)
    with tempfile.TemporaryDirectory(prefix="offload-") as offload:
        whole = run(folder, 0, offload, args.new_tokens)
        offloaded = run(folder, limit, offload, args.new_tokens)
    mib = 2**20
    print(
        f"\n== offload: {folder.name}, {size / mib:.0f} MiB of float32 weights, max_memory['cpu'] = {limit / mib:.0f} MiB"
    )
    print(f"threads {common.THREADS}, load average {common.load_average()}")
    for name, result in (("in memory", whole), ("offloaded", offloaded)):
        growth = result["peak"] - result["runtime"]
        print(
            f"  {name:10s} peak RSS {result['peak']:7.0f} MiB = runtime {result['runtime']:.0f} + {growth:6.0f} MiB "
            f"(limit {limit / mib if result is offloaded else float('nan'):.0f}); layers cpu/disk "
            f"{result['cpu_layers']}/{result['disk_layers']}; load {result['load']:.2f} s; "
            f"{result['per_token'] * 1000:.1f} ms/token"
        )
    growth = offloaded["peak"] - offloaded["runtime"]
    print(f"  peak over runtime within the limit: {growth <= limit / mib} ({growth:.0f} <= {limit / mib:.0f} MiB)")
    print(f"  greedy tokens equal: {offloaded['tokens'] == whole['tokens']}")
    print(f"  slowdown per token: {offloaded['per_token'] / whole['per_token']:.1f}x")
    common.write_json(
        "offload", {"size_mib": size / mib, "limit_mib": limit / mib, "whole": whole, "offloaded": offloaded}
    )


if __name__ == "__main__":
    main()

"""Prefill speed: one forward pass over a prompt, microformers vs the reference, side by side in one process.

    .venv/bin/python bench/prefill.py [--model smollm2|random] [--length 512 2048] [--repeats 5] [--cpu-time]

Both run ``model(ids, use_cache=True, logits_to_keep=1)`` (what generate does for the prompt) in
float32 under ``torch.inference_mode()``; tokens/s = batch * length / median time of interleaved
runs (reference, microformers, reference, ...; one warm-up call each first). ``--cpu-time`` times the
CPU time of this process instead of the wall clock: on a machine whose cores other work shares, run
it with ``MICROFORMERS_BENCH_THREADS=1``. The last-position logits of the two are compared: a row whose
difference exceeds ``--tolerance`` (1e-4) is marked ``LOGITS DIFFER``. ``--profile`` prints a
``torch.profiler`` table (operators by self CPU time) of one more call of each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--length", type=int, nargs="+", default=[512], help="prompt lengths in tokens")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cpu-time", action="store_true", help="time with process CPU time, not wall time")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest last-position logit difference")
    parser.add_argument("--profile", action="store_true", help="print a torch.profiler table for each length")
    args = parser.parse_args()
    if any(length < 1 for length in args.length) or args.batch < 1 or args.repeats < 1:
        parser.error("--length, --batch and --repeats must be positive")

    import torch

    common.set_threads()
    clock = time.process_time if args.cpu_time else time.perf_counter
    folder = common.model_folder(args.model)
    models = {"reference": common.load_reference(folder), "microformers": common.load_ours(folder)}
    rows = []
    payload: dict[str, object] = {}
    for length in args.length:
        ids, _ = common.prompts(folder, args.batch, length=length)
        times: dict[str, list[float]] = {name: [] for name in models}
        logits = {}
        with torch.inference_mode():
            for name, model in models.items():  # warm-up
                logits[name] = model(ids, use_cache=True, logits_to_keep=1).logits
            for _ in range(args.repeats):
                for name, model in models.items():
                    seconds, _out = common.timed(
                        lambda model=model, ids=ids: model(ids, use_cache=True, logits_to_keep=1), clock=clock
                    )
                    times[name].append(seconds)
            if args.profile:
                _profile(models, ids)
        speed = {name: args.batch * length / common.median(t) for name, t in times.items()}
        difference = (logits["microformers"] - logits["reference"]).abs().max().item()
        ratio = f"{speed['microformers'] / speed['reference']:.2f}x"
        rows.append(
            (
                f"prefill tokens/s, {length} tokens, batch {args.batch} (max |logit diff| {difference:.1e})",
                f"{speed['microformers']:.0f}",
                f"{speed['reference']:.0f}",
                ratio if difference <= args.tolerance else f"{ratio} LOGITS DIFFER",
            )
        )
        payload[str(length)] = {"tokens_per_s": speed, "times": times, "max_logit_difference": difference}
    timing = "process CPU time" if args.cpu_time else "wall time"
    note = (
        f"{timing}, {common.THREADS} thread(s), medians of {args.repeats} interleaved runs; "
        f"load average {common.load_average()}"
    )
    common.print_table(f"prefill, {args.model}, float32, use_cache=True, logits_to_keep=1", rows, note)
    common.write_json("prefill", payload)


def _profile(models: dict[str, object], ids: object) -> None:
    from torch.profiler import ProfilerActivity, profile

    for name, model in models.items():
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            model(ids, use_cache=True, logits_to_keep=1)  # type: ignore[operator]
        print(f"\n== profile: {name}")
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()

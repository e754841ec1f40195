"""Prefill speed: one forward pass over a 512-token prompt, microformers vs the reference, one process.

    .venv/bin/python bench/prefill.py [--model smollm2|random] [--length 512] [--repeats 5]

Both run ``model(ids, use_cache=True, logits_to_keep=1)`` (what generate does for the prompt) in
float32 under ``torch.inference_mode()``; tokens/s = length / median wall time of interleaved runs.
The last-position logits of the two are compared as well.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch

    common.set_threads()
    folder = common.model_folder(args.model)
    models = {"reference": common.load_reference(folder), "microformers": common.load_ours(folder)}
    ids, _ = common.prompts(folder, args.batch, length=args.length)
    times: dict[str, list[float]] = {name: [] for name in models}
    logits = {}
    with torch.inference_mode():
        for name, model in models.items():  # warm-up
            logits[name] = model(ids, use_cache=True, logits_to_keep=1).logits
        for _ in range(args.repeats):
            for name, model in models.items():
                seconds, _out = common.timed(lambda model=model: model(ids, use_cache=True, logits_to_keep=1))
                times[name].append(seconds)
    speed = {name: args.batch * args.length / common.median(t) for name, t in times.items()}
    difference = (logits["microformers"] - logits["reference"]).abs().max().item()
    rows = [
        (
            f"prefill tokens/s, {args.length} tokens, batch {args.batch}",
            f"{speed['microformers']:.0f}",
            f"{speed['reference']:.0f}",
            f"{speed['microformers'] / speed['reference']:.2f}x",
        )
    ]
    note = (
        f"max |logit difference| at the last position: {difference:.2e}; medians of {args.repeats} interleaved "
        f"runs; load average {common.load_average()}"
    )
    common.print_table(f"prefill, {args.model}, float32", rows, note)
    common.write_json("prefill", {"tokens_per_s": speed, "times": times, "max_logit_difference": difference})


if __name__ == "__main__":
    main()

"""Model load time and peak memory: microformers vs the reference, one fresh process per measurement.

    .venv/bin/python bench/load.py [--model smollm2|random] [--repeats 3] [--no-gguf]

Rows: ``from_pretrained`` of the float32 safetensors folder, and of the Q4_1 GGUF file
(de-quantised to float32), each timed after the imports, alone and with the first forward pass
(which faults in memory-mapped weights); peak RSS of the process (``VmHWM``)
after loading and after one greedy batch-1 generate of 128 tokens, and the growth of that last peak
over the RSS measured just before loading, against the size of the float32 weights (safetensors are
memory-mapped, so pages only count once the first forward pass touches them: the peak after
loading alone understates what the weights cost). Every number is the median over ``--repeats`` fresh interpreters per implementation,
so neither implementation's memory or imports contaminate the other's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

CHILD = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
import _common as common
common.set_threads()
import torch
impl, source, generate, new_tokens = {impl!r}, {source!r}, {generate!r}, {new_tokens!r}
if impl == "reference":
    import transformers as lib
else:
    import microformers as lib
lib.AutoModelForCausalLM  # resolve lazy imports before timing
kwargs = dict(dtype=torch.float32)
if source == "gguf":
    folder, kwargs["gguf_file"] = str(common.gguf_folder()), common.GGUF_NAME
else:
    folder = {folder!r}
before = common.current_rss_mb()
start = time.perf_counter()
model = lib.AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()
seconds = time.perf_counter() - start
after_load = common.peak_rss_mb()
with torch.inference_mode():
    start = time.perf_counter()
    model(torch.arange(100, 108).unsqueeze(0))
    first_forward = time.perf_counter() - start
weights_mb = sum(p.numel() * p.element_size() for p in {{id(p): p for p in model.parameters()}}.values()) / 2**20
result = dict(seconds=seconds, first_forward=first_forward, rss_before=before, peak_after_load=after_load, weights_mb=weights_mb)
if generate:
    ids = torch.arange(100, 124).unsqueeze(0)
    model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=2)
    result["peak_after_generate"] = common.peak_rss_mb()
print("RESULT " + json.dumps(result))
"""


def measure(impl: str, source: str, folder: Path, generate: bool, new_tokens: int = 128) -> dict[str, float]:
    code = CHILD.format(
        bench=str(Path(__file__).resolve().parent),
        impl=impl,
        source=source,
        folder=str(folder),
        generate=generate,
        new_tokens=new_tokens,
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise SystemExit(f"{impl} {source} load failed:\n{completed.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-gguf", action="store_true", help="skip the GGUF rows")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens of the generate after loading")
    args = parser.parse_args()
    folder = common.model_folder(args.model)
    sources = ["safetensors"] + ([] if args.no_gguf or args.model != "smollm2" else ["gguf"])
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for _ in range(args.repeats):  # interleaved, so a busy moment hits both implementations
        for source in sources:
            for impl in ("microformers", "reference"):
                try:
                    outcome = measure(impl, source, folder, source == "safetensors", args.new_tokens)
                except SystemExit as failure:
                    print(failure, file=sys.stderr)
                    continue
                results.setdefault(source, {}).setdefault(impl, []).append(outcome)

    def med(source: str, impl: str, key: str) -> float:
        return common.median([r[key] for r in results.get(source, {}).get(impl, []) if key in r])

    rows: list[tuple[str, str, str, str]] = []
    for source in sources:
        ours, theirs = med(source, "microformers", "seconds"), med(source, "reference", "seconds")
        rows.append((f"load {source} (s)", f"{ours:.2f}", f"{theirs:.2f}", f"{theirs / ours:.2f}x faster"))
        ours += med(source, "microformers", "first_forward")
        theirs += med(source, "reference", "first_forward")
        rows.append(
            (f"load {source} + first forward (s)", f"{ours:.2f}", f"{theirs:.2f}", f"{theirs / ours:.2f}x faster")
        )
    weights = med("safetensors", "microformers", "weights_mb")
    for key, label in (
        ("peak_after_load", "after load"),
        ("peak_after_generate", f"after {args.new_tokens}-token generate"),
    ):
        ours, theirs = med("safetensors", "microformers", key), med("safetensors", "reference", key)
        rows.append((f"peak RSS {label} (MiB)", f"{ours:.0f}", f"{theirs:.0f}", f"{ours / theirs:.2f}"))
    growth = {
        impl: med("safetensors", impl, "peak_after_generate") - med("safetensors", impl, "rss_before")
        for impl in ("microformers", "reference")
    }
    rows.append(
        (
            "peak RSS growth (load + generate) / weights",
            f"{growth['microformers'] / weights:.2f}",
            f"{growth['reference'] / weights:.2f}",
            f"{growth['microformers'] / growth['reference']:.2f}",
        )
    )
    note = (
        f"float32 weights: {weights:.0f} MiB; medians of {args.repeats} fresh processes per implementation; "
        f"load average {common.load_average()}"
    )
    common.print_table(f"loading {args.model} (ratio: reference time / ours, or our memory / theirs)", rows, note)
    common.write_json("load", {"model": args.model, "results": results})


if __name__ == "__main__":
    main()

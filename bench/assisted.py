"""Prompt-lookup decoding speed-up on an input-copying task: microformers vs the reference, one process.

    .venv/bin/python bench/assisted.py [--model smollm2|random] [--new-tokens 96] [--lookup 10] [--repeats 3]

The prompt is a passage of the test corpus written twice and started a third time, so a language
model continues by copying the passage (the case prompt lookup is for). Each measurement is
``model.generate(ids, max_new_tokens=N, do_sample=False)`` with and without
``prompt_lookup_num_tokens``, float32, ``torch.set_num_threads(2)``, batch 1. tokens/s = new tokens
/ wall time of the call (prompt included). Variants are interleaved and repeated; medians are
printed. The tokens of every variant are compared with the reference's plain greedy output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common


def copying_prompt(folder: Path) -> Any:
    import torch

    corpus_dir = Path(__file__).resolve().parent.parent / "tests" / "corpus"
    text = next(p for p in sorted(corpus_dir.glob("*.md")) if p.name != "README.md").read_text(encoding="utf-8")
    ids = common._tokenize(folder, text)
    if not ids:  # no tokenizer (random model): a repeated id pattern stands in
        ids = [(7 * i) % 40000 + 100 for i in range(400)]
    passage = ids[:120]
    return torch.tensor([passage * 2 + passage[:16]])  # seen twice, then started again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--lookup", type=int, default=10, help="prompt_lookup_num_tokens")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    common.set_threads()
    folder = common.model_folder(args.model)
    reference = common.load_reference(folder)
    ours = common.load_ours(folder)
    ids = copying_prompt(folder)
    n = args.new_tokens
    # eos is ignored (min_new_tokens) so every variant produces exactly n tokens
    plain = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "pad_token_id": 2}
    lookup = {**plain, "prompt_lookup_num_tokens": args.lookup}
    variants: dict[str, Any] = {
        "reference greedy": lambda: reference.generate(ids, **plain),
        "reference prompt lookup": lambda: reference.generate(ids, **lookup),
        "microformers greedy": lambda: ours.generate(ids, **plain),
        "microformers prompt lookup": lambda: ours.generate(ids, **lookup),
    }
    outputs = {name: run() for name, run in variants.items()}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, run in variants.items():
            seconds, outputs[name] = common.timed(run)
            times[name].append(seconds)
    speed = {name: n / common.median(t) for name, t in times.items()}
    expected = outputs["reference greedy"]
    same = {name: bool(torch.equal(out, expected)) for name, out in outputs.items()}
    passage = ids[0, :120].repeat(1 + n // 120)
    copied = float((expected[0, ids.shape[1] :] == passage[16 : 16 + n]).float().mean())

    def flag(name: str) -> str:
        return "" if same[name] else " TOKENS DIFFER"

    rows = [
        (
            "greedy tokens/s",
            f"{speed['microformers greedy']:.1f}",
            f"{speed['reference greedy']:.1f}",
            f"{speed['microformers greedy'] / speed['reference greedy']:.2f}x" + flag("microformers greedy"),
        ),
        (
            f"prompt lookup ({args.lookup}) tokens/s",
            f"{speed['microformers prompt lookup']:.1f}",
            f"{speed['reference prompt lookup']:.1f}",
            f"{speed['microformers prompt lookup'] / speed['reference prompt lookup']:.2f}x"
            + flag("microformers prompt lookup"),
        ),
        (
            "speed-up of prompt lookup over greedy",
            f"{speed['microformers prompt lookup'] / speed['microformers greedy']:.2f}x",
            f"{speed['reference prompt lookup'] / speed['reference greedy']:.2f}x",
            "",
        ),
    ]
    notes = (
        f"batch 1, prompt {ids.shape[1]} tokens, {n} new tokens ({copied:.0%} of them copy the passage); "
        f"medians of {args.repeats} interleaved runs; load average {common.load_average()}"
    )
    common.print_table(f"prompt-lookup decoding, {args.model}, float32", rows, notes)
    common.write_json("assisted", {"speed": speed, "times": times, "tokens_identical": same, "copied": copied})


if __name__ == "__main__":
    main()

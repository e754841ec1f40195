"""Import time: `import microformers` (+ touching the Auto classes) vs `import transformers`, in one run.

Each measurement is a fresh interpreter; the best of N runs is reported.
    .venv/bin/python bench/import_time.py [--runs 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CASES = {
    "microformers": "import microformers",
    "microformers + Auto classes": "import microformers; microformers.AutoModelForCausalLM; microformers.AutoTokenizer",
    "transformers": "import transformers",
    "transformers + Auto classes": "import transformers; transformers.AutoModelForCausalLM; transformers.AutoTokenizer",
}


def best_time(code: str, runs: int) -> float:
    timer = f"import time; t=time.perf_counter(); {code}; print(time.perf_counter()-t)"
    return min(float(subprocess.check_output([sys.executable, "-c", timer], text=True)) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    times = {name: best_time(code, args.runs) for name, code in CASES.items()}
    print(f"{'import':34s} {'seconds':>8s}")
    for name, seconds in times.items():
        print(f"{name:34s} {seconds:8.3f}")
    ratio = times["transformers"] / times["microformers"]
    print(f"\nkernel import is {ratio:.0f}x faster than `import transformers` (best of {args.runs})")
    ratio_auto = times["transformers + Auto classes"] / times["microformers + Auto classes"]
    print(f"with Auto classes touched: {ratio_auto:.1f}x")


if __name__ == "__main__":
    main()

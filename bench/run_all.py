"""Every benchmark in one run: microformers vs the reference implementation, ratios printed per row.

    make bench            # or: .venv/bin/python bench/run_all.py [--model smollm2|random] [--quick]

Runs, in order: import time, model loading and peak memory (fresh processes per implementation),
prefill at 512 tokens, greedy decode at batch 1 and 8 (eager and compiled), then the GGUF and
tokenizer scripts when they are present. Set ``MICROFORMERS_BENCH_JSON=<folder>`` to also get the
raw numbers as JSON, ``MICROFORMERS_BENCH_THREADS`` to change the thread count (default 2).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(script: str, *arguments: str) -> int:
    path = HERE / script
    if not path.is_file():
        print(f"\n(skipped {script}: not present)")
        return 0
    print(f"\n$ {Path(sys.executable).name} bench/{script} {' '.join(arguments)}".rstrip(), flush=True)
    started = time.perf_counter()
    code = subprocess.call([sys.executable, str(path), *arguments])
    print(f"({script} took {time.perf_counter() - started:.0f}s, exit status {code})", flush=True)
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--quick", action="store_true", help="one repeat each, 32 new tokens (a smoke run)")
    args = parser.parse_args()
    repeats = ["--repeats", "1"] if args.quick else []
    decode_extra = ["--new-tokens", "32"] if args.quick else []
    codes = [
        run("import_time.py", *(["--runs", "1"] if args.quick else [])),
        run("load.py", "--model", args.model, *repeats),
        run("prefill.py", "--model", args.model, *repeats),
        run("decode.py", "--model", args.model, *repeats, *decode_extra),
        run("gguf_load.py"),
        run("tokenizer_overhead.py"),
        run("train.py", "--model", args.model, *(["--quick"] if args.quick else [])),
        run("asr.py", *repeats, *(["--seconds", "10"] if args.quick else [])),
    ]
    sys.exit(max(codes))


if __name__ == "__main__":
    main()

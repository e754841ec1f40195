"""Every benchmark in one run: microformers vs the reference implementation, ratios printed per row.

    make bench            # or: .venv/bin/python bench/run_all.py [--model smollm2|random] [--quick]

Runs, in order: import time, model loading and peak memory (fresh processes per implementation),
prefill at 512 tokens, greedy decode at batch 1 and 8 (eager and compiled), then the GGUF and
tokenizer scripts when they are present, training, speech recognition, beam-search translation, and serving
(``microformers serve`` against ``transformers serve`` and, where installed, llama.cpp's server, with the fault row). Set ``MICROFORMERS_BENCH_JSON=<folder>`` to also get the
raw numbers as JSON, ``MICROFORMERS_BENCH_THREADS`` to change the thread count (default 2).

``--quick`` is a smoke run of every script that finishes in a few minutes: one repeat each, 32 new
tokens (16 in the memory rows' generate), no compiled decode step (its compilation alone takes a
minute per shape), one GGUF load per implementation, a smaller tokenizer corpus, the 2-layer training model and 10 s of audio. Memory
rows are always measured in fresh processes that only load (and generate with) one implementation.
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
    parser.add_argument("--quick", action="store_true", help="a smoke run of every script in a few minutes")
    args = parser.parse_args()
    started = time.perf_counter()
    repeats = ["--repeats", "1"] if args.quick else []
    decode_extra = ["--new-tokens", "32", "--no-compile"] if args.quick else []
    codes = [
        run("import_time.py", *(["--runs", "1"] if args.quick else [])),
        run("load.py", "--model", args.model, *repeats, *(["--new-tokens", "16"] if args.quick else [])),
        run("prefill.py", "--model", args.model, *repeats),
        run("decode.py", "--model", args.model, *repeats, *decode_extra),
        run("gguf_load.py", *(["--repeat", "1"] if args.quick else [])),
        run("tokenizer_overhead.py", *(["--texts", "2000", "--repeats", "1"] if args.quick else [])),
        run("train.py", "--model", args.model, *(["--quick"] if args.quick else [])),
        run("asr.py", *repeats, *(["--seconds", "10"] if args.quick else [])),
        run("seq2seq.py", *(["--sentences", "16", "--new-tokens", "16"] if args.quick else [])),
        run("whisper.py", *repeats, *(["--seconds", "30"] if args.quick else [])),
        run("vision.py", *(["--quick"] if args.quick else [])),
        run("onnx.py", *(["--sentences", "16", "--new-tokens", "16"] if args.quick else [])),
        run("serve.py", "--model", args.model, *(["--quick"] if args.quick else ["--threads", "1"])),
    ]
    print(f"\nall benchmarks took {time.perf_counter() - started:.0f}s", flush=True)
    sys.exit(max(codes))


if __name__ == "__main__":
    main()

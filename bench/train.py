"""Training throughput and memory: microformers' ``Trainer`` vs the reference's, same model, data and arguments.

    .venv/bin/python bench/train.py [--model random|smollm2] [--steps 5] [--repeats 1] [--quick]

SmolLM2-135M's shape (Llama, 30 layers, hidden 576), float32, sequence 128, per-device batch 8, AdamW
(``adamw_torch_fused``, both sides' default), linear schedule, clipping at 1.0, no checkpoints, no
logging output. Each measurement is a fresh process that loads one implementation and trains
``--steps`` optimizer steps; the first step is a warm-up and is not timed. Rows: optimizer steps per
second (median over ``--repeats`` interleaved processes) and the process's peak RSS (``ru_maxrss``).
``--quick`` uses a 2-layer, hidden-64 Llama and 3 steps, as a smoke test of the script.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

SEQ, BATCH = 128, 8
QUICK_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024}  # fmt: skip


def quick_folder() -> Path:
    import torch
    import transformers

    folder = common.BENCH_DIR / "quick-llama-train"
    if not (folder / "model.safetensors").is_file():
        torch.manual_seed(0)
        config = transformers.LlamaConfig(**{**common.SMOLLM2_SHAPE, **QUICK_SHAPE})
        transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def worker(impl: str, folder: Path, steps: int) -> dict[str, Any]:
    """Runs in a fresh process: load ``impl``, train ``steps`` steps, report timings and peak RSS."""
    common.set_threads()
    import torch

    if impl == "ours":
        import microformers as lib

        model = lib.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    else:
        import transformers as lib

        model = lib.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, vocab, (SEQ,), generator=g).tolist() for _ in range(BATCH * steps)]
    data = [{"input_ids": r, "labels": r} for r in rows]
    stamps: list[float] = []

    class Clock(lib.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            stamps.append(time.perf_counter())

    args = lib.TrainingArguments(
        output_dir=str(common.BENCH_DIR / f"train-{impl}"),
        per_device_train_batch_size=BATCH,
        max_steps=steps,
        learning_rate=1e-4,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    trainer = lib.Trainer(model=model, args=args, train_dataset=data, callbacks=[Clock()])
    trainer.train()
    timed = stamps[-1] - stamps[0]
    return {"steps_per_s": (len(stamps) - 1) / timed, "peak_rss_mb": common.peak_rss_mb()}


def run_worker(impl: str, folder: Path, steps: int) -> dict[str, Any]:
    code = (
        "import json, sys; sys.path.insert(0, 'bench'); import train; from pathlib import Path; "
        f"print('RESULT', json.dumps(train.worker({impl!r}, Path({str(folder)!r}), {steps})))"
    )
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{impl} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("random", "smollm2"), default="random")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    ns = parser.parse_args()
    steps = 3 if ns.quick else max(ns.steps, 2)
    folder = quick_folder() if ns.quick else common.model_folder(ns.model)
    results: dict[str, list[dict[str, Any]]] = {"reference": [], "ours": []}
    for _ in range(ns.repeats):
        for impl in ("reference", "ours"):
            results[impl].append(run_worker(impl, folder, steps))
    med = {
        impl: {k: common.median([r[k] for r in rs]) for k in ("steps_per_s", "peak_rss_mb")}
        for impl, rs in results.items()
    }
    ours, ref = med["ours"], med["reference"]
    speed = ours["steps_per_s"] / ref["steps_per_s"]
    memory = ours["peak_rss_mb"] / ref["peak_rss_mb"]
    rows = [
        ("optimizer steps/s", f"{ours['steps_per_s']:.3f}", f"{ref['steps_per_s']:.3f}", f"{speed:.2f}x"),
        ("peak RSS (MiB)", f"{ours['peak_rss_mb']:.0f}", f"{ref['peak_rss_mb']:.0f}", f"{memory:.2f}"),
    ]
    title = (
        f"training, {folder.name}, fp32, seq {SEQ}, batch {BATCH}, {steps - 1} timed steps, {common.THREADS} threads"
    )
    common.print_table(title, rows, note=f"load average: {common.load_average()}")
    common.write_json("train", {"results": results, "median": med, "steps": steps, "folder": str(folder)})


if __name__ == "__main__":
    main()

"""Distributed training on CPU: FSDP2 vs DDP (2 processes, gloo, torchrun) vs one process, with our ``Trainer``.

    .venv/bin/python bench/train_distributed.py [--steps 4] [--threads 1] [--quick]

SmolLM2-135M's shape (Llama, 30 layers, hidden 576, tied embeddings), random weights, float32, sequence 128,
the same global batch everywhere: 4 rows a step for the single process, 2 rows a process for DDP and FSDP2
(``fsdp="full_shard"``). AdamW (the Trainer's default), no checkpoints. Each mode is a fresh launch; the
first optimizer step is a warm-up and is not timed. Rows, per process (the worst process for the distributed
modes): optimizer steps/s (wall), CPU seconds per step (``time.process_time``: the number to compare on a busy
machine), RSS once the model is built, peak RSS (``VmHWM``) over the whole process and over the timed steps
(reset after the warm-up step, so building the full model before sharding is left out), and the bytes of parameters + optimizer state the process holds (the local
shards under FSDP2), with FSDP2's ratio to DDP (the goal is at most 0.6x). ``--quick``: a 2-layer, hidden-64
Llama and 3 steps, as a smoke test of the script.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

SEQ, GLOBAL_BATCH, PROCESSES = 128, 4, 2
QUICK_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024}  # fmt: skip
MODES = ("single", "ddp", "fsdp")


def _tensor_bytes(tensor: Any) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def _reset_peak_rss() -> None:
    """Start ``VmHWM`` again from the current RSS (Linux: ``5`` into ``/proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def worker(mode: str, out: Path, steps: int, threads: int, quick: bool) -> None:
    """One process of ``mode``: build the model, train ``steps`` steps, write ``result_<mode>_<rank>.json``."""
    import torch

    torch.set_num_threads(threads)
    import microformers

    shape = {**common.SMOLLM2_SHAPE, **(QUICK_SHAPE if quick else {})}
    torch.manual_seed(0)
    model = microformers.AutoModelForCausalLM.from_config(microformers.AutoConfig.for_model("llama", **shape))
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    batch = GLOBAL_BATCH // world
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, shape["vocab_size"], (SEQ,), generator=g).tolist() for _ in range(GLOBAL_BATCH * steps)]
    stamps: list[tuple[float, float]] = []

    built_rss = common.current_rss_mb()
    whole_peak: list[float] = []

    class Clock(microformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            stamps.append((time.perf_counter(), time.process_time()))
            if len(stamps) == 1:  # after the warm-up step: the peak from here on is the steady training one
                whole_peak.append(common.peak_rss_mb())
                _reset_peak_rss()

    args = microformers.TrainingArguments(
        output_dir=str(out / f"trainer-{mode}"),
        per_device_train_batch_size=batch,
        max_steps=steps,
        learning_rate=1e-4,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
        fsdp="full_shard" if mode == "fsdp" else "",
    )
    data = [{"input_ids": r, "labels": r} for r in rows]
    trainer = microformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[Clock()])
    trainer.train()
    params = sum(_tensor_bytes(p) for p in trainer.model.parameters())
    optimizer = sum(
        _tensor_bytes(v) for state in trainer.optimizer.state.values() for v in state.values() if torch.is_tensor(v)
    )
    (wall0, cpu0), (wall1, cpu1) = stamps[0], stamps[-1]
    timed = len(stamps) - 1
    result = {
        "mode": mode,
        "rank": rank,
        "processes": world,
        "rows_per_process": batch,
        "steps_per_s": timed / (wall1 - wall0),
        "cpu_s_per_step": (cpu1 - cpu0) / timed,
        "rss_after_build_mb": built_rss,
        "peak_rss_mb": max(whole_peak[0], common.peak_rss_mb()),
        "training_peak_rss_mb": common.peak_rss_mb(),
        "param_mb": params / 2**20,
        "optimizer_mb": optimizer / 2**20,
    }
    (out / f"result_{mode}_{rank}.json").write_text(json.dumps(result))
    if world > 1:  # leave without interpreter finalisation (gloo's threads; see plugins/trainer/tests)
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
        sys.stdout.flush()
        os._exit(0)


def launch(
    mode: str, out: Path, steps: int, threads: int, quick: bool, mmap_threshold: int | None
) -> list[dict[str, Any]]:
    script = Path(__file__).resolve()
    tail = ["--worker", mode, "--out", str(out), "--steps", str(steps), "--threads", str(threads)]
    tail += ["--quick"] if quick else []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if mmap_threshold is not None:  # glibc: blocks this large and larger are mmapped, so freeing them lowers RSS
        env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    if mode == "single":
        cmd = [sys.executable, str(script), *tail]
    else:
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        cmd = [torchrun, "--standalone", "--nproc_per_node", str(PROCESSES), str(script), *tail]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=script.parent.parent)
    results = [json.loads(p.read_text()) for p in sorted(out.glob(f"result_{mode}_*.json"))]
    if proc.returncode != 0 or len(results) != (1 if mode == "single" else PROCESSES):
        raise SystemExit(f"{mode} run failed:\n{proc.stderr[-4000:]}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps, the first one untimed")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--malloc-mmap-threshold",
        type=int,
        help="glibc MALLOC_MMAP_THRESHOLD_ for the workers (e.g. 1048576): freed tensors go back to the system, "
        "so RSS follows the live tensors instead of what glibc's heap keeps",
    )
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    steps = 3 if ns.quick else max(ns.steps, 2)
    if ns.worker:
        worker(ns.worker, ns.out, steps, ns.threads, ns.quick)
        return
    out = common.BENCH_DIR / "train-distributed"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    results = {mode: launch(mode, out, steps, ns.threads, ns.quick, ns.malloc_mmap_threshold) for mode in ns.modes}
    worst = {
        mode: {
            "steps_per_s": min(r["steps_per_s"] for r in rs),
            "cpu_s_per_step": max(r["cpu_s_per_step"] for r in rs),
            "rss_after_build_mb": max(r["rss_after_build_mb"] for r in rs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "training_peak_rss_mb": max(r["training_peak_rss_mb"] for r in rs),
            "param_optimizer_mb": max(r["param_mb"] + r["optimizer_mb"] for r in rs),
        }
        for mode, rs in results.items()
    }
    shape = "2-layer quick llama" if ns.quick else "SmolLM2-135M shape (random)"
    print(
        f"\n== distributed training on CPU, {shape}, fp32, seq {SEQ}, global batch {GLOBAL_BATCH}, "
        f"{steps - 1} timed steps, {ns.threads} thread(s) a process, gloo"
    )
    names = {"single": "1 process", "ddp": f"DDP x{PROCESSES}", "fsdp": f"FSDP2 x{PROCESSES}"}
    header = ("", *(names[m] for m in ns.modes))
    rows = [
        ("optimizer steps/s (wall)", "steps_per_s", "{:.3f}"),
        ("CPU s per step, per process", "cpu_s_per_step", "{:.2f}"),
        ("RSS once the model is built (MiB)", "rss_after_build_mb", "{:.0f}"),
        ("peak RSS per process (MiB)", "peak_rss_mb", "{:.0f}"),
        ("peak RSS of the timed steps (MiB)", "training_peak_rss_mb", "{:.0f}"),
        ("params + optimizer state per process (MiB)", "param_optimizer_mb", "{:.0f}"),
    ]
    table = [header] + [(name, *(fmt.format(worst[m][key]) for m in ns.modes)) for name, key, fmt in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)))
    malloc = f", MALLOC_MMAP_THRESHOLD_={ns.malloc_mmap_threshold}" if ns.malloc_mmap_threshold else ""
    if "fsdp" not in worst or "ddp" not in worst:
        print(f"load average: {common.load_average()}{malloc}")
        return
    ratio = worst["fsdp"]["param_optimizer_mb"] / worst["ddp"]["param_optimizer_mb"]
    rss = worst["fsdp"]["training_peak_rss_mb"] / worst["ddp"]["training_peak_rss_mb"]
    speed = worst["fsdp"]["cpu_s_per_step"] / worst["ddp"]["cpu_s_per_step"]
    print(
        f"FSDP2 / DDP: params + optimizer state {ratio:.2f}x (goal <= 0.6x), peak RSS of the timed steps {rss:.2f}x, CPU time a step {speed:.2f}x"
    )
    print(f"load average: {common.load_average()}{malloc}")
    common.write_json("train_distributed", {"results": results, "worst": worst, "steps": steps})


if __name__ == "__main__":
    main()

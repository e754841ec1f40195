"""Image encoding throughput: microformers vs the reference, ViT-B/16-shaped and CLIP-B/32-shaped random models.

    .venv/bin/python bench/vision.py [--repeats 3] [--batches 1 16] [--quick]

Two models, each made once by the reference with random weights, saved under ``$TMPDIR/microformers-bench`` and
loaded by both implementations (float32, eager PyTorch, the default attention: SDPA):

- ``ViTForImageClassification`` with ViT-B/16's shape (224x224 images, 16-pixel patches, 12 layers of 768, 1000
  labels): ``model(pixel_values).logits``;
- ``CLIPModel`` with CLIP ViT-B/32's shape (vision tower 12 layers of 768 on 32-pixel patches, text tower 12 layers
  of 512): ``model.get_image_features(pixel_values)``, the image side of zero-shot classification and retrieval.

Each row is one batch size; each number is the median of ``--repeats`` interleaved runs after a warm-up, in images
per second of CPU time (``time.process_time``: all threads' CPU seconds, steadier than wall time on a shared
machine) and of wall time. The ratio is ours over the reference's throughput (above 1: microformers is faster).
The outputs of both implementations are compared (max abs difference). ``--quick``: one timed run per row, for a
check that finishes in a couple of minutes. ``--compile`` adds rows where both models run under ``torch.compile``
(default options, as the reference's ``perf_torch_compile`` page does; the warm-up call compiles, and its time is
printed apart). ``--profile`` prints, per model and batch size, where each implementation's forward spends its CPU
time (``torch.profiler``, the operators with the most self time; run it with ``MICROFORMERS_BENCH_THREADS=1`` for
one thread's account) instead of timing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

VIT_B16: dict[str, Any] = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "image_size": 224,
    "patch_size": 16,
    "num_labels": 1000,
}
# CLIPConfig's defaults are openai/clip-vit-base-patch32's shape.
CLIP_B32: dict[str, Any] = {"text_config": {}, "vision_config": {}, "projection_dim": 512}


def model_folder(name: str) -> Path:
    folder = common.BENCH_DIR / f"{name}-random"
    if (folder / "model.safetensors").is_file() and (folder / "config.json").is_file():
        return folder
    import torch
    import transformers

    common.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=common.BENCH_DIR))
    torch.manual_seed(0)
    if name == "vit-b16":
        model = transformers.ViTForImageClassification(transformers.ViTConfig(**VIT_B16))
    else:
        model = transformers.CLIPModel(transformers.CLIPConfig(**CLIP_B32))
    model.save_pretrained(staging)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    staging.rename(folder)
    return folder


def load_both(name: str) -> dict[str, Any]:
    import torch
    import transformers

    import microformers

    folder = model_folder(name)
    if name == "vit-b16":
        return {
            "microformers": microformers.AutoModelForImageClassification.from_pretrained(folder).eval(),
            "reference": transformers.ViTForImageClassification.from_pretrained(folder, dtype=torch.float32).eval(),
        }
    return {
        "microformers": microformers.AutoModel.from_pretrained(folder).eval(),
        "reference": transformers.CLIPModel.from_pretrained(folder, dtype=torch.float32).eval(),
    }


def encode(name: str, model: Any, pixels: Any) -> Any:
    if name == "vit-b16":
        return model(pixel_values=pixels).logits
    return model.get_image_features(pixel_values=pixels).pooler_output


def time_batch(
    name: str, mode: str, batch: int, runners: dict[str, Any], repeats: int, results: dict[str, Any]
) -> list[tuple[str, str, str, str]]:
    import torch

    pixels = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch))
    cpu: dict[str, list[float]] = {impl: [] for impl in runners}
    wall: dict[str, list[float]] = {impl: [] for impl in runners}
    outputs: dict[str, Any] = {}
    first_call: dict[str, float] = {}
    with torch.inference_mode():
        for impl, run in runners.items():
            start = time.perf_counter()
            outputs[impl] = run(pixels)  # warm-up (compiles in the compiled mode)
            first_call[impl] = time.perf_counter() - start
        for _ in range(repeats):
            for impl, run in runners.items():
                wall_start = time.perf_counter()
                seconds, outputs[impl] = common.timed(lambda r=run: r(pixels), clock=time.process_time)
                cpu[impl].append(seconds)
                wall[impl].append(time.perf_counter() - wall_start)
    diff = float((outputs["microformers"] - outputs["reference"]).abs().max())
    ours_cpu, ref_cpu = batch / common.median(cpu["microformers"]), batch / common.median(cpu["reference"])
    ours_wall, ref_wall = batch / common.median(wall["microformers"]), batch / common.median(wall["reference"])
    label = f"{mode}, batch {batch}"
    results[f"{name}/{mode}/batch{batch}"] = {
        "ours_images_per_cpu_s": ours_cpu,
        "reference_images_per_cpu_s": ref_cpu,
        "ours_images_per_s": ours_wall,
        "reference_images_per_s": ref_wall,
        "max_abs_diff": diff,
        "first_call_s": first_call,
    }
    rows = [
        (f"{label}, images/s CPU time", f"{ours_cpu:.2f}", f"{ref_cpu:.2f}", f"{ours_cpu / ref_cpu:.2f}x"),
        (f"{label}, images/s wall", f"{ours_wall:.2f}", f"{ref_wall:.2f}", f"{ours_wall / ref_wall:.2f}x"),
        (f"{label}, max |ours - reference|", f"{diff:.1e}", "", ""),
    ]
    if mode == "compiled":
        rows.append((f"{label}, first call (compiles), s", f"{first_call['microformers']:.1f}",
                     f"{first_call['reference']:.1f}", ""))  # fmt: skip
    return rows


def profile_batch(name: str, batch: int, runners: dict[str, Any], rows: int) -> None:
    """The top ``rows`` operators by self CPU time of one forward of each implementation (after a warm-up)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    pixels = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch))
    with torch.inference_mode():
        for impl, run in runners.items():
            run(pixels)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                run(pixels)
            print(f"\n== {name}, batch {batch}, {impl}")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--models", nargs="+", default=["vit-b16", "clip-b32"], choices=["vit-b16", "clip-b32"])
    parser.add_argument("--quick", action="store_true", help="one timed run per row")
    parser.add_argument("--compile", action="store_true", help="also time both models under torch.compile")
    parser.add_argument("--profile", action="store_true", help="print each forward's top operators instead of timing")
    args = parser.parse_args()
    if args.profile and args.compile:
        parser.error("--profile profiles the eager forward; drop --compile")
    repeats = 1 if args.quick else args.repeats
    common.set_threads()
    import torch

    print(f"{common.THREADS} threads, float32, median of {repeats}, load average {common.load_average()}")
    results: dict[str, Any] = {}
    for name in args.models:
        models = load_both(name)
        if args.profile:
            runners = {impl: (lambda p, m=model, n=name: encode(n, m, p)) for impl, model in models.items()}
            for batch in args.batches:
                profile_batch(name, batch, runners, rows=12)
            continue
        rows: list[tuple[str, str, str, str]] = []
        modes = ["eager", "compiled"] if args.compile else ["eager"]
        for mode in modes:
            runners = {impl: (lambda p, m=model, n=name: encode(n, m, p)) for impl, model in models.items()}
            if mode == "compiled":
                runners = {impl: torch.compile(run) for impl, run in runners.items()}
            for batch in args.batches:
                rows += time_batch(name, mode, batch, runners, repeats, results)
        title = "ViT-B/16-shaped ViTForImageClassification" if name == "vit-b16" else (
            "CLIP-B/32-shaped CLIPModel.get_image_features")  # fmt: skip
        common.print_table(title, rows)
        del models
    if not args.profile:
        common.write_json("vision", results)


if __name__ == "__main__":
    main()

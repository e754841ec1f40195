"""Beam-search translation throughput: microformers vs the reference on encoder-decoder models, side by side.

    .venv/bin/python bench/seq2seq.py [--model marian t5] [--sentences 64] [--beams 4] [--new-tokens 32]

Random models of Marian's (opus-mt: d_model 512, 6+6 layers, 58k vocabulary) and t5-small's shape
(d_model 512, 6+6 layers, 32k vocabulary), made by the reference and saved once under the bench
folder, so both implementations load identical weights. ``--sentences`` random-token sentences of
8 to 40 tokens (seeded) are translated in batches of ``--batch`` with beam search; every sentence
gets exactly ``--new-tokens`` new tokens (``min_new_tokens = max_new_tokens``), so both do the same
work whatever the random weights prefer. Each implementation runs in its own fresh process, which
reports wall time, CPU time and its peak resident memory (VmHWM); the ratio is reference / ours
(above 1: we are faster or smaller). ``--int8`` adds our int8 weights (``microformers-quant``) against
the reference's float32 (it has no CPU int8 path), as CTranslate2 reports its speed.
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

from _common import BENCH_DIR, load_average, peak_rss_mb, print_table, set_threads, write_json

SHAPES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "marian": (
        "MarianConfig",
        "MarianMTModel",
        {
            "vocab_size": 58101,
            "decoder_vocab_size": 58101,
            "d_model": 512,
            "encoder_layers": 6,
            "decoder_layers": 6,
            "encoder_attention_heads": 8,
            "decoder_attention_heads": 8,
            "encoder_ffn_dim": 2048,
            "decoder_ffn_dim": 2048,
            "activation_function": "swish",
            "max_position_embeddings": 512,
            "pad_token_id": 58100,
            "decoder_start_token_id": 58100,
            "eos_token_id": 0,
            "forced_eos_token_id": 0,
            "scale_embedding": True,
            "share_encoder_decoder_embeddings": True,
        },
    ),
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        {
            "vocab_size": 32128,
            "d_model": 512,
            "d_kv": 64,
            "d_ff": 2048,
            "num_layers": 6,
            "num_heads": 8,
            "feed_forward_proj": "relu",
            "pad_token_id": 0,
            "eos_token_id": 1,
            "decoder_start_token_id": 0,
        },
    ),
}


def model_folder(kind: str) -> Path:
    """The random checkpoint of ``kind``'s shape, made by the reference once and reused."""
    folder = BENCH_DIR / f"random-{kind}-f32"
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return folder
    import torch
    import transformers

    config_name, model_name, shape = SHAPES[kind]
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**shape))
    staging = folder.with_name(folder.name + ".partial")
    model.save_pretrained(staging)
    staging.rename(folder)
    return folder


def sentences(kind: str, count: int) -> list[list[int]]:
    import torch

    vocab = SHAPES[kind][2]["vocab_size"]
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(8, 41, (count,), generator=generator)
    # ids from 10 up: no special token inside a sentence
    return [torch.randint(10, vocab - 10, (int(n),), generator=generator).tolist() for n in lengths]


def worker(implementation: str, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    set_threads()
    folder = model_folder(kind)
    if implementation == "reference":
        import transformers

        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()
    else:
        import microformers

        quantization = microformers.Int8Config() if implementation == "ours-int8" else None
        model = microformers.AutoModelForSeq2SeqLM.from_pretrained(
            folder, dtype=torch.float32, quantization_config=quantization
        ).eval()
    pad = SHAPES[kind][2]["pad_token_id"]
    rows = sentences(kind, args.sentences)
    batches = []
    for start in range(0, len(rows), args.batch):
        chunk = rows[start : start + args.batch]
        width = max(len(r) for r in chunk)
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in chunk])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in chunk])
        batches.append((ids, mask))
    settings = {
        "num_beams": args.beams,
        "max_new_tokens": args.new_tokens,
        "min_new_tokens": args.new_tokens,
        "do_sample": False,
    }
    outputs = []
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        for ids, mask in batches:
            outputs.append(model.generate(input_ids=ids, attention_mask=mask, **settings))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = sum(int(o.shape[0] * (o.shape[1] - 1)) for o in outputs)
    return {"wall_s": wall, "cpu_s": cpu, "peak_mb": peak_rss_mb(), "tokens": tokens, "first": outputs[0][0].tolist()}


def run_worker(implementation: str, kind: str, argv: list[str]) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", implementation, "--model", kind, *argv]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{implementation} {kind} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", nargs="+", choices=sorted(SHAPES), default=["marian", "t5"])
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="sentences per generate call")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--int8", action="store_true", help="also time our int8 weights against the reference")
    parser.add_argument("--worker", choices=["ours", "ours-int8", "reference"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.model[0], args)))
        return
    passed = ["--sentences", str(args.sentences), "--batch", str(args.batch), "--beams", str(args.beams)]
    passed += ["--new-tokens", str(args.new_tokens)]
    results: dict[str, Any] = {}
    for kind in args.model:
        model_folder(kind)  # made once, outside the timed processes
        reference = run_worker("reference", kind, passed)
        ours = run_worker("ours", kind, passed)
        results[kind] = {"ours": ours, "reference": reference}
        same = "same" if ours["first"] == reference["first"] else "DIFFERENT"
        rows = _rows(ours, reference, args.sentences)
        if args.int8:
            results[kind]["ours-int8"] = int8 = run_worker("ours-int8", kind, passed)
            rows += [(f"int8: {what}", a, b, r) for what, a, b, r in _rows(int8, reference, args.sentences)]
        print_table(
            f"{kind}: beam-{args.beams} translation of {args.sentences} sentences, {args.new_tokens} new tokens each, "
            f"batches of {args.batch}",
            rows,
            note=f"first translation {same} in both; load average {load_average()}",
        )
    write_json("seq2seq", results)


def _rows(ours: dict[str, Any], reference: dict[str, Any], sentences: int) -> list[tuple[str, str, str, str]]:
    return [
        (
            "sentences/s (wall)",
            f"{sentences / ours['wall_s']:.2f}",
            f"{sentences / reference['wall_s']:.2f}",
            f"{reference['wall_s'] / ours['wall_s']:.2f}x",
        ),
        (
            "sentences/s (CPU time)",
            f"{sentences / ours['cpu_s']:.2f}",
            f"{sentences / reference['cpu_s']:.2f}",
            f"{reference['cpu_s'] / ours['cpu_s']:.2f}x",
        ),
        (
            "peak memory MiB",
            f"{ours['peak_mb']:.0f}",
            f"{reference['peak_mb']:.0f}",
            f"{reference['peak_mb'] / ours['peak_mb']:.2f}x",
        ),
    ]


if __name__ == "__main__":
    main()
